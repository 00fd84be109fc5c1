// Command metrics is the default demo of ratekit (examples/demo, on
// net/http) with Prometheus metrics at GET /metrics, never limited: -metrics
// is on by default here. The default program leaves the Prometheus client
// out, so as to build fast; this one builds it:
//
//	go run ./examples/demo/metrics -limit 5
//	curl -s http://127.0.0.1:8080/metrics | grep ratekit_requests_total
//
// See examples/demo/README.md for the routes and flags.
package main

import (
	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/prommetrics"
)

func main() { demo.Main(program) }

// program is the default program with metrics, on by default.
var program = withMetrics(demo.StdHTTP)

// withMetrics returns p with Prometheus metrics, on by default.
func withMetrics(p demo.Program) demo.Program {
	p.Metrics, p.MetricsByDefault = prommetrics.New, true
	return p
}
