package rulesfile_test

import (
	"fmt"
	"log"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

func ExampleParse() {
	cfg, err := rulesfile.Parse("rules.yaml", []byte(`domain: auth
descriptors:
  - key: remote_address
    match: {method: POST, path: /login}
    rate_limit:
      unit: minute
      requests_per_unit: 5
`))
	if err != nil {
		log.Fatal(err)
	}
	d := cfg.Descriptors[0]
	fmt.Println(cfg.Domain, d.Key, d.Match.Methods, d.Match.Path, d.RateLimit.RequestsPerUnit, d.RateLimit.Unit)

	_, err = rulesfile.Parse("rules.yaml", []byte(`domain: auth
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: five
`))
	fmt.Println(err)
	// Output:
	// auth remote_address [POST] /login 5 minute
	// rules.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a non-negative integer, got the string "five"
}

func ExampleWatch() {
	e, err := rules.NewEngine()
	if err != nil {
		log.Fatal(err)
	}
	w, err := rulesfile.Watch(e, "/etc/ratekit/rules.yaml")
	if err != nil {
		log.Fatal(err) // the file is missing or invalid
	}
	defer w.Close()
	// ... serve requests with e; edits to the file apply as they are saved.
}
