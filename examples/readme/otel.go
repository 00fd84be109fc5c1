package readme

// snippet: otel
import (
	ratekitotel "github.com/ratekit/ratekit/otel" // module github.com/ratekit/ratekit/otel
	"go.opentelemetry.io/otel"
)

// end snippet

import "github.com/ratekit/ratekit/core"

// otelLimiter builds a limiter of limit whose decisions the OpenTelemetry
// metrics of the global meter provider count, and passes it to use.
func otelLimiter(limit core.Limit, use func(*core.Limiter) error) error {
	// snippet: otel
	m, err := ratekitotel.New(otel.GetMeterProvider(), ratekitotel.WithStore("redis"))
	if err != nil {
		return err
	}
	lim, err := core.NewLimiter(limit, core.WithObserver(m.Observe))
	// end snippet
	if err != nil {
		return err
	}
	return use(lim)
}
