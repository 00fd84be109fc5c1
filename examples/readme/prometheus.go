package readme

// snippet: prometheus
import (
	"github.com/prometheus/client_golang/prometheus"
	ratekitprom "github.com/ratekit/ratekit/prometheus" // module github.com/ratekit/ratekit/prometheus
)

// end snippet

import "github.com/ratekit/ratekit/core"

// promLimiter builds a limiter of limit in store whose decisions the
// Prometheus metrics of the default registry count, and passes it to use.
// It registers the metrics: call it once.
func promLimiter(limit core.Limit, store core.Store, use func(*core.Limiter) error) error {
	// snippet: prometheus
	m, err := ratekitprom.New(ratekitprom.WithStore("redis"))
	if err != nil {
		return err
	}
	prometheus.MustRegister(m)
	lim, err := core.NewLimiter(limit, core.WithStore(store), core.WithObserver(m.Observe))
	// end snippet
	if err != nil {
		return err
	}
	return use(lim)
}
