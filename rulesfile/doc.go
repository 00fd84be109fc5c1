// Package rulesfile loads rate-limit rules from YAML files into a
// rules.Config, and watches a file to reload it when it changes.
//
// The files have the schema and the meaning of the Envoy rate-limit
// service (envoyproxy/ratelimit), so its configuration files load
// unchanged, plus ratekit's extensions (cascade; match; algorithm, burst
// and soft_percent):
//
//	domain: api
//	descriptors:
//	  - key: remote_address
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 10
//	  - key: remote_address
//	    value: 50.0.0.5
//	    rate_limit:             # a block list entry
//	      unit: second
//	      requests_per_unit: 0
//	  - key: header:X-API-Key
//	    match:                  # ratekit: only POST /login
//	      method: POST          # or a list: [GET, HEAD]
//	      path: /login
//	    shadow_mode: true
//	    rate_limit:
//	      name: login
//	      unit: minute
//	      requests_per_unit: 5
//	      algorithm: token-bucket   # ratekit
//	      burst: 10                 # ratekit
//	      soft_percent: 20          # ratekit
//
// Parse checks a file's shape and rules.Engine.Load the meaning of its
// rules. Both report each problem as a *rules.Error, formatted as
// "file:line: path: message", such as
//
//	rules.yaml:7: descriptors[1]: unknown key "rate_limt" (did you mean "rate_limit"?); known keys: ...
//
// Load reads a file into a Target, usually a *rules.Engine; Watch does the
// same and then reloads the file whenever it changes, keeping the rules in
// force when a new version is invalid:
//
//	e, err := rules.NewEngine()
//	...
//	w, err := rulesfile.Watch(e, "/etc/ratekit/rules.yaml")
//	if err != nil {
//		log.Fatal(err) // the file is missing or invalid
//	}
//	defer w.Close()
package rulesfile
