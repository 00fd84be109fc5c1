package demo

import (
	"log/slog"
	"time"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
)

// With -elastic PERCENT the flag-built limit of GET / (and of every other
// request it limits) admits up to PERCENT% more requests while this server
// has spare capacity (core.WithElastic), and is exact when it has none.
// The capacity signal is the one package concurrency has built in: a
// limiter of concurrency.MaxSlots per client IP, mounted around every
// route, counts the requests in flight on this server and refuses none in
// practice; its Spare(N) reports room while fewer than N
// (-elastic-in-flight) are in flight, the one being decided included.
//
// An elastic admission is an ordinary 200 whose X-RateLimit-Remaining is
// 0 (the headers report the limit itself, never the ceiling), counted
// under decision="elastic_allowed" in the metrics of -metrics.

// defaultElasticInFlight is the default of -elastic-in-flight.
const defaultElasticInFlight = 100

// leaseTTL is the lease TTL of the demo's concurrency limiters: a demo
// server that dies holds no slot in Redis for longer, and the leases of
// requests that run are renewed every quarter of it.
const leaseTTL = 2 * time.Second

// parseElastic validates -elastic and -elastic-in-flight, after the flags
// of the limit, -config and -store.
func (c *config) parseElastic(percent, inFlight int, set map[string]bool) error {
	if percent == 0 { // off
		if set["elastic-in-flight"] {
			return cli.Usagef("-elastic-in-flight applies only with -elastic")
		}
		return nil
	}
	switch {
	case percent < 0 || percent > 1000:
		return cli.Usagef("-elastic %d: must be a percentage from 1 to 1000 (100 admits up to twice the limit), or 0 for none", percent)
	case c.rulesFile != "" || c.rulesRedis != nil:
		return cli.Usagef("-elastic applies only without -config: it stretches the flag-built limit, which the rules replace")
	case c.store == "hybrid":
		return cli.Usagef("-elastic does not work with -store hybrid, whose counts are not shared between a limit and its elastic ceiling; use -store memory or redis")
	case inFlight < 1 || inFlight > concurrency.MaxSlots:
		return cli.Usagef("-elastic-in-flight %d: must be a whole number from 1 to %d", inFlight, concurrency.MaxSlots)
	}
	// The limit stretched must be valid too (a count of at most
	// core.MaxCount).
	if _, err := core.NewLimiter(c.limit, core.WithElastic(percent, func() bool { return false })); err != nil {
		return cli.Usagef("-elastic %d with -limit %d: %w", percent, c.limit.Rate.Count, err)
	}
	c.elastic, c.elasticInFlight = percent, inFlight
	return nil
}

// inFlightLimiter returns the limiter that counts the requests in flight
// on this server, for the capacity signal of -elastic: MaxSlots per client
// IP, in this process's memory, whatever -store is, since the signal is
// this server's.
func inFlightLimiter(log *slog.Logger) (*concurrency.Limiter, error) {
	return concurrency.NewLimiter(concurrency.MaxSlots, concurrency.WithName("in-flight"),
		concurrency.WithLeaseTTL(leaseTTL), concurrency.WithLogger(log))
}
