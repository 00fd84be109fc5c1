package redisstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

// An Option configures a Store. The hybrid store (redisstore/hybrid) has
// an Option type of its own: the options of one store do not compile as
// the other's.
type Option func(*Store) error

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix, "rk", starts every key unless WithPrefix says otherwise.
const DefaultPrefix = keys.DefaultPrefix

// DefaultInFlight is how many round trips a Store keeps on the wire at once
// unless WithInFlight says otherwise. Four measured best on loopback with
// 8 and 64 goroutines (see BenchmarkTake): with one, 8 goroutines wait on
// one round trip's latency; with 8 or more, batches are shallower and
// Redis spends more per decision.
const DefaultInFlight = 4

// WithPrefix sets the first part of every key the store writes (default
// DefaultPrefix), to keep ratekit's keys apart from an application's own
// or two deployments apart in one Redis. It may hold letters, digits and
// "-_./:", at most 64 bytes. A key is the prefix and 24 bytes: with a
// prefix of up to 4 bytes, keys stay within the 28 bytes that Redis
// stores in its smallest key allocation (see Store.Key).
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		if err := keys.CheckPrefix(prefix); err != nil {
			return err
		}
		s.prefix = prefix
		return nil
	}
}

// WithTimeout bounds the time one decision may take, from the call to the
// answer, waiting for a pooled connection included (default
// DefaultTimeout). A decision that runs out of time is an error, which the
// limiter's fail mode turns into an admission or a 503.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: timeout %s must be positive", d)
		}
		s.timeout = d
		return nil
	}
}

// WithClock makes the scripts take the time from now, in nanoseconds,
// instead of from Redis TIME. It exists for tests that replay exact
// traces against a real Redis; a production store must not use it, since
// servers with skewed clocks would then disagree. Under a test clock,
// keys live ten minutes of real time longer than their state needs (test
// time and real time do not pass alike), and Bind rejects periods and
// bucket refill times longer than about 13 days, whose nanoseconds the
// scripts could not hold exactly.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return errors.New("redisstore: WithClock(nil)")
		}
		s.clock = now
		return nil
	}
}

// WithFallback makes the store decide on an in-process memory store while
// its circuit is open, instead of failing every decision until Redis
// answers (which the limiter's fail mode turns into admissions, or 503s).
// Each limit's count and burst are divided by instances (rounded up):
// with the number of servers sharing the limit, the fleet as a whole
// admits about the limit while Redis is away, each server up to its
// share. Counts made in the fallback stay there: when Redis answers
// again, decisions go back to the counts in Redis, as they were.
//
// Without this option, the fallback still decides one thing: a request
// whose client has no key yet while Redis is out of memory (see New),
// with each server admitting up to the full limit.
func WithFallback(instances int) Option {
	return func(s *Store) error {
		if instances < 1 || instances > 100_000 {
			return fmt.Errorf("redisstore: fallback instances %d must be 1 to 100000", instances)
		}
		s.fallback = instances
		return nil
	}
}

// WithInFlight sets how many round trips to Redis the store keeps in
// flight at once (default DefaultInFlight). Decisions beyond them wait for
// the next round trip and share it, pipelined. Fewer round trips in flight
// make deeper pipelines, and fewer system calls on the application server
// and on Redis per decision; more lower the wait under light concurrency.
// Each round trip in flight holds one pooled connection (per cluster node)
// while it lasts, so n must leave connections in the client's pool for the
// application's own commands.
//
// Pipelining needs a client that applies context deadlines itself
// (ContextTimeoutEnabled); with any other client every decision is its own
// round trip, bounded by a goroutine of its own (see New).
func WithInFlight(n int) Option {
	return func(s *Store) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("redisstore: in-flight round trips %d must be 1 to 1024", n)
		}
		s.inflight = n
		return nil
	}
}

// WithLogger sets the logger of the episodes during which Redis is out of
// memory (default slog.Default()): one line when the store first finds
// Redis full, one with the count of decisions made meanwhile when Redis
// has room again (at most two lines per 10 seconds, however often the
// two alternate). The limiter logs the store's failures itself
// (core.WithLogger).
func WithLogger(log *slog.Logger) Option {
	return func(s *Store) error {
		if log == nil {
			return errors.New("redisstore: WithLogger(nil)")
		}
		s.log = log
		return nil
	}
}
