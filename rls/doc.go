// Package rls is Envoy's rate limit service (envoy.service.ratelimit.v3)
// over ratekit's rules and stores: the gRPC service that Envoy's rate
// limit filter, and the gateways built on Envoy, ask whether a request
// may pass. `ratekit serve` runs it; this package lets a program embed
// it.
//
// A request names a domain and lists descriptors, each a list of entries
// (key and value). A Service holds one rules.Engine per domain, loaded
// from the Envoy service's configuration files by package rulesfile, and
// answers as the Envoy service does:
//
//   - each descriptor gets the rate limit that rules.Engine.Lookup finds
//     for it, or none;
//   - its status says OK or OVER_LIMIT, the limit (requests per unit),
//     the requests remaining and the time until the reset, in whole
//     seconds; an unlimited descriptor remains 4294967295;
//   - the overall code is OVER_LIMIT if any descriptor is over a limit
//     that is not in shadow mode;
//   - hits_addend, shadow_mode, replaces, the per-request limit override
//     (WithLimitOverrides) and the response headers (WithResponseHeaders)
//     mean what they mean there.
//
// Unlike the Envoy service, the descriptors of a request are decided all
// or nothing (core.TakeEach): a request over one limit is counted by none
// of them, so a client that keeps being rejected by one limit does not
// use up the others. The rate limits may use any of core's algorithms
// (a rules file's algorithm), not only fixed windows, and soft
// throttling; the counters live in any core.Store: memory, Redis, hybrid
// or regions.
//
//	e, err := rules.NewEngine(rules.WithStore(store))
//	...
//	w, err := rulesfile.Watch(e, "/etc/ratekit/config.yaml") // hot reload
//	...
//	svc, err := rls.New([]*rules.Engine{e})
//	...
//	srv := grpc.NewServer()
//	svc.Register(srv)
//
// The JSON handler serves the same decisions over HTTP, as the Envoy
// service's POST /json.
package rls
