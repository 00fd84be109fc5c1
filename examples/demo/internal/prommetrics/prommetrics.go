// Package prommetrics makes the metrics of the demo's -metrics with
// Prometheus (package ratekitprom): a program of the demo that gives New
// as its Program.Metrics serves them at GET /metrics, in a registry of
// their own. The default program leaves this package out, and with it the
// Prometheus client and its dependencies, so as to build fast.
package prommetrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

// New returns the metrics of a demo server whose limiters are on store,
// counting the keys of the memory limits. It is a demo.NewMetrics.
func New(store string, memory []demo.MemoryLimit) (demo.Metrics, error) {
	opts := []ratekitprom.Option{ratekitprom.WithStore(store)}
	for _, m := range memory {
		opts = append(opts, ratekitprom.WithMemoryStore(m.Store, m.Limit))
	}
	m, err := ratekitprom.New(opts...)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return metrics{m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

// metrics are ratekitprom's metrics and the handler of their registry.
type metrics struct {
	*ratekitprom.Metrics
	handler http.Handler
}

func (m metrics) Handler() http.Handler { return m.handler }
