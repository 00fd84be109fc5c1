package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/redis/go-redis/v9"
)

// POST /reports builds a report, which takes a while: ?ms= milliseconds
// of simulated work (default 1000, at most 5000), cut short when the
// request's context ends. Two limits guard it, per client IP, one after
// the other: a rate limit (10 a minute, fixed window), then a cap of 2
// reports in flight at once (package concurrency), so that a client
// cannot tie up the server with slow requests however slowly it sends
// them. The third report at once is answered 429 with Retry-After (1 s,
// a policy: no one knows when a slot frees) and the rate limit's
// X-RateLimit fields; a report over the rate never takes a slot.
//
// The slots are leases in this process or, with -store redis or hybrid,
// in the -redis server (redisstore's Concurrency store), where every demo
// server on that Redis shares each client's 2 slots, and the slots of a
// server that died free themselves within the lease TTL (leaseTTL).

// reportsLimit is the rate limit of POST /reports per client IP; a fixed
// window, which every store takes.
var reportsLimit = core.Limit{Name: "reports", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)}

// Reports in flight per client IP, and the work of one.
const (
	reportsInFlight = 2
	reportWork      = time.Second     // without ?ms=
	maxReportWork   = 5 * time.Second // the most ?ms= asks
)

// Reports is the POST /reports route: its rate limiter, its concurrency
// limiter (in that order), and the handler that builds a report.
type Reports struct {
	Limiter  *core.Limiter
	InFlight *concurrency.Limiter
	Build    http.Handler
}

// badWork is the answer to an ?ms= out of bounds (http.Error adds a
// newline). No client text is in it.
var badWork = fmt.Sprintf("ms: want a whole number of milliseconds from 0 to %d", maxReportWork.Milliseconds())

// reports builds the route. clock, if not nil, is the clock of the rate
// limiter's memory store (for tests); shared is the store of -store redis
// or hybrid, and exact the Redis store of the leases (exactStore), both
// nil in memory. work, if not nil, does a report's work instead of
// waiting (for tests).
func (c *config) reports(clock func() time.Time, shared core.Store, exact *redisstore.Store, work func(context.Context, time.Duration) error, log *slog.Logger) (*Reports, error) {
	rate, err := c.newLimiter(reportsLimit, clock, shared, log)
	if err != nil {
		return nil, err
	}
	opts := []concurrency.Option{concurrency.WithName("reports-in-flight"),
		concurrency.WithLeaseTTL(leaseTTL), concurrency.WithLogger(log)}
	if exact != nil {
		opts = append(opts, concurrency.WithStore(exact.Concurrency()))
	}
	if c.failClosed {
		opts = append(opts, concurrency.WithFailClosed())
	}
	inFlight, err := concurrency.NewLimiter(reportsInFlight, opts...)
	if err != nil {
		return nil, err
	}
	if work == nil {
		work = wait
	}
	build := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := reportWork
		if ms := r.URL.Query().Get("ms"); ms != "" {
			n, err := strconv.Atoi(ms)
			if err != nil || n < 0 || n > int(maxReportWork.Milliseconds()) {
				http.Error(w, badWork, http.StatusBadRequest)
				return
			}
			d = time.Duration(n) * time.Millisecond
		}
		if err := work(r.Context(), d); err != nil {
			// The client went away, or the server is shutting down
			// (under Fiber, whose requests' contexts end only then).
			http.Error(w, "report cancelled", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", TextPlain)
		_, _ = fmt.Fprintf(w, "report ready after %s of work\n", d)
	})
	return &Reports{Limiter: rate, InFlight: inFlight, Build: build}, nil
}

// wait waits d, or until ctx ends and then returns its error.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exactStore returns the Redis store of what -store hybrid cannot hold,
// and of what must be exact across servers: the leases of POST /reports
// and the token bucket that paces GET /upstream. It is the shared store
// itself with -store redis (without -overlimit-cache), else a store on
// the same client and prefix; nil in memory. clock, if not nil, is its
// clock (for tests).
func (c *config) exactStore(clock func() time.Time, shared core.Store, rdb redis.UniversalClient) (*redisstore.Store, error) {
	if rdb == nil {
		return nil, nil
	}
	if s, ok := shared.(*redisstore.Store); ok {
		return s, nil
	}
	opts := []redisstore.Option{redisstore.WithPrefix(c.redisPrefix)}
	if clock != nil {
		opts = append(opts, redisstore.WithClock(clock))
	}
	return redisstore.New(rdb, opts...)
}
