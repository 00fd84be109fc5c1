// Package concurrency caps the requests in flight: at most Max requests
// of one key (a client, an API key, a tenant) are being served at once,
// whatever their rate. Where a rate limit counts requests over time, a
// concurrency limit counts requests that have started and not finished,
// which is what slow endpoints (uploads, reports, searches) run out of.
//
// The model, in three words: limiter, lease, store.
//
//   - A [Limiter] holds the policy: its name, Max slots per key, the
//     lease TTL, the Retry-After of a refusal and the fail mode.
//   - [Limiter.Acquire] takes a slot for a key and returns a [Lease], or
//     a [Result] that says the key is full. A refusal is not an error.
//     The holder gives the slot back with [Lease.Release] (middleware
//     does so in a defer, so a panicking handler releases it too).
//   - A [Store] keeps the leases: the [MemoryStore] of this process (the
//     default) or Redis (package redisstore), where every server of an API
//     shares the slots of a key.
//
// A lease lasts its TTL unless renewed: while it is held, the limiter
// renews it every quarter of its TTL, so a request that runs for an hour
// keeps its slot, and a lease whose holder vanished (a server that crashed
// or was killed, a partition) frees its slot within one TTL of its last
// renewal. No crash leaks a slot for longer.
//
// When the store fails, the limiter fails open by default (the request is
// admitted and counted in this instance only); [WithFailClosed] refuses
// it instead. Failures are logged once per episode, never once per
// request.
//
// The limiter also counts the requests in flight in this instance, over
// all keys ([Limiter.InFlight]); [Limiter.Spare] turns the count into the
// capacity signal of elastic throttling. To use the signal without a
// per-key cap, build a limiter of [MaxSlots]: it counts every request and
// refuses none in practice.
//
// Middleware for net/http (package stdhttp, which Chi uses too) and for
// Gin, Echo and Fiber answers a full key with 429 Too Many Requests,
// Retry-After and the problem-details body of the rate-limit middleware
// (package adapter does the shared part). It stacks with the rate-limit
// middleware on the same route; put the rate limit first, so that a
// request over its rate never takes a slot.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/episode"
)

// MaxSlots is the largest Max a limiter accepts.
const MaxSlots = 1 << 20

// Lease TTL bounds and default (WithLeaseTTL).
const (
	DefaultLeaseTTL = 10 * time.Second
	MinLeaseTTL     = 100 * time.Millisecond
	MaxLeaseTTL     = 24 * time.Hour
)

// DefaultRetryAfter is the Retry-After of a refusal unless WithRetryAfter
// says otherwise.
const DefaultRetryAfter = time.Second

// A Store keeps the leases of concurrency limiters: MemoryStore in this
// process, redisstore's shared between servers. It is safe for concurrent
// use.
//
// The slots of a key under a limiter's name are the store's to count:
// limiters with the same name share them. A lease is identified by id,
// unique within this process among the leases held; a store shared between
// processes makes it unique across them. A lease is held until it is
// released or its TTL has passed since it was acquired or last renewed.
//
// Acquire adds the lease when fewer than max unexpired leases are held
// for the key, and reports the leases held afterwards (this one included)
// or, when it refuses, the leases that made it refuse. Acquiring a lease
// that is already held renews it. Release removes the lease, if held;
// Renew extends a held lease by ttl from now and reports whether it was
// held (false when it expired or was released: it is not added again).
// Keys with no lease held keep no state.
//
// An error means the store failed, or an argument was impossible; a
// refusal is admitted false.
type Store interface {
	Acquire(ctx context.Context, name, key string, id uint64, max int, ttl time.Duration) (held int, admitted bool, err error)
	Release(ctx context.Context, name, key string, id uint64) error
	Renew(ctx context.Context, name, key string, id uint64, ttl time.Duration) (held bool, err error)
}

// An Option configures a Limiter.
type Option func(*Limiter) error

// WithName names the limiter: in stores, where limiters with the same
// name share slots, and as the limit of a refusal's problem body. It may
// hold ASCII letters, digits and core.NameSymbols, at most 64 bytes. The
// default is derived from Max, such as "8-in-flight".
func WithName(name string) Option {
	return func(l *Limiter) error {
		if err := checkName(name); err != nil {
			return err
		}
		l.name = name
		return nil
	}
}

// WithStore sets the store of the leases (default: a MemoryStore of the
// limiter's own).
func WithStore(s Store) Option {
	return func(l *Limiter) error {
		if s == nil {
			return errors.New("ratekit: concurrency: WithStore(nil)")
		}
		if m, ok := s.(*MemoryStore); ok {
			m.once.Do(m.init)
			if m.err != nil {
				return m.err
			}
		}
		l.store = s
		return nil
	}
}

// WithLeaseTTL sets how long a lease lasts unless renewed (default
// DefaultLeaseTTL, from MinLeaseTTL to MaxLeaseTTL): the longest a slot
// stays taken after its holder vanished. Held leases are renewed every
// quarter of it, one store call each.
func WithLeaseTTL(ttl time.Duration) Option {
	return func(l *Limiter) error {
		if ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
			return fmt.Errorf("%w: concurrency lease TTL %s must be between %s and %s", core.ErrInvalidLimit, ttl, MinLeaseTTL, MaxLeaseTTL)
		}
		l.ttl = ttl
		return nil
	}
}

// WithRetryAfter sets the Retry-After of a refusal (default
// DefaultRetryAfter), from one second to an hour: when a client should
// try again, which no one knows for a slot, so it is a policy.
func WithRetryAfter(d time.Duration) Option {
	return func(l *Limiter) error {
		if d < time.Second || d > time.Hour {
			return fmt.Errorf("%w: concurrency retry-after %s must be between 1s and 1h", core.ErrInvalidLimit, d)
		}
		l.retry = d
		return nil
	}
}

// WithFailClosed refuses requests while the store is failing, with the
// limiter's Retry-After; middleware answers 503 Service Unavailable.
// Without it the limiter fails open: a request is admitted, and counted
// by InFlight, but by no store.
func WithFailClosed() Option {
	return func(l *Limiter) error { l.failClosed = true; return nil }
}

// WithLogger sets the logger of store failures, logged once per episode
// (default slog.Default()). Middleware logs its key errors to its own
// logger, as the rate-limit middleware does.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) error {
		if log == nil {
			return errors.New("ratekit: concurrency: WithLogger(nil)")
		}
		l.log = log
		return nil
	}
}

// A Limiter lets at most Max requests of each key be in flight at once.
// It is safe for concurrent use.
type Limiter struct {
	name       string
	max        int
	ttl        time.Duration
	retry      time.Duration
	store      Store
	failClosed bool
	log        *slog.Logger

	inFlight atomic.Int64
	failures episode.Log // of the store
	manual   bool        // tests renew by hand: no renewing goroutine

	// orphans are leases whose acquire failed or was abandoned but may
	// still land in the store (a call that timed out runs once the
	// store answers again): released after the next call the store
	// answers, which it takes after them. At most maxOrphans; beyond,
	// the lease TTL frees them.
	orphanMu   sync.Mutex
	orphans    []orphan
	hasOrphans atomic.Bool

	mu       sync.Mutex
	held     Lease  // sentinel of the ring of leases held in the store
	renewing bool   // a goroutine renews the leases held
	ticks    uint64 // renewal ticks so far
	due      []*Lease
}

// NewLimiter returns a limiter of max slots per key (1 to MaxSlots), after
// validating every option: a bad value is an error wrapping
// core.ErrInvalidLimit, never a panic.
func NewLimiter(max int, opts ...Option) (*Limiter, error) {
	if max < 1 || max > MaxSlots {
		return nil, fmt.Errorf("%w: concurrency max %d must be between 1 and %d", core.ErrInvalidLimit, max, MaxSlots)
	}
	l := &Limiter{max: max, ttl: DefaultLeaseTTL, retry: DefaultRetryAfter, log: slog.Default()}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.name == "" {
		l.name = strconv.Itoa(max) + "-in-flight"
	}
	if l.store == nil {
		l.store = &MemoryStore{}
	}
	l.held.prev, l.held.next = &l.held, &l.held
	return l, nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Max returns the slots per key.
func (l *Limiter) Max() int { return l.max }

// InFlight returns the requests this instance admitted and has not
// released yet, over all keys; those admitted while the store failed
// open included.
func (l *Limiter) InFlight() int { return int(l.inFlight.Load()) }

// Spare returns a capacity signal for elastic throttling: a function that
// reports true while fewer than n requests are in flight in this instance
// (InFlight() < n). It is safe for concurrent use and does not allocate;
// n below 1 gives a signal that is never true.
//
//	lim, err := core.NewLimiter(limit, core.WithElastic(100, inflight.Spare(64)))
func (l *Limiter) Spare(n int) func() bool {
	return func() bool { return l.inFlight.Load() < int64(n) }
}

// A Result is the outcome of Acquire.
type Result struct {
	Admitted   bool          // a slot was taken (or the store failed open)
	InFlight   int           // the key's leases held, this one included when admitted; 0 when the store failed
	Max        int           // the limiter's slots per key
	RetryAfter time.Duration // when a refused request may retry: the limiter's Retry-After; 0 when admitted
}

// ErrFull is the error of a MemoryStore that holds its MaxKeys keys, all
// with leases held, when a new key arrives and its Overflow has no room.
// It is not a failure of the store but a bound: the limiter refuses the
// request whatever its fail mode (middleware answers 503 with
// Retry-After), and the store logs it once per episode.
var ErrFull = errors.New("ratekit: concurrency: memory store full")

// Acquire takes a slot for key, for a request that starts now, and
// returns the lease to release when it ends; the lease is nil when the
// request is refused.
//
// A full key is a Result with Admitted false and a nil error. An error
// means the key was empty (wrapping core.ErrMissingKey; nothing is
// decided), ctx ended first (refused, whatever the fail mode, and not
// logged), the memory store was full (ErrFull: refused, whatever the fail
// mode; the store logs it), or the store failed: then the fail mode
// decides, open (admitted, with a lease that counts in InFlight only) or
// closed (refused).
func (l *Limiter) Acquire(ctx context.Context, key string) (Result, *Lease, error) {
	if key == "" {
		return Result{}, nil, fmt.Errorf("%w: empty concurrency key", core.ErrMissingKey)
	}
	id := nextID.Add(1)
	held, ok, err := l.store.Acquire(ctx, l.name, key, id, l.max, l.ttl)
	if errors.Is(err, ErrFull) {
		// A bound, not a failure: the store answered, and took nothing.
		l.answered()
		return Result{Max: l.max, RetryAfter: l.retry}, nil, err
	}
	if err != nil {
		// The store may take the slot all the same, after the caller
		// stopped waiting (a call queued behind a slow script): it is
		// released once the store answers again, so that no slot stays
		// held by nobody.
		l.orphan(key, id)
	}
	if err != nil && ctx.Err() != nil {
		// The caller gave up (the client went away): not a store failure.
		return Result{Max: l.max, RetryAfter: l.retry}, nil, err
	}
	if err != nil {
		l.failed(err)
		if l.failClosed {
			return Result{Max: l.max, RetryAfter: l.retry}, nil, err
		}
		return Result{Admitted: true, Max: l.max}, l.lease(key, id, false), err
	}
	l.answered()
	if !ok {
		return Result{InFlight: held, Max: l.max, RetryAfter: l.retry}, nil, nil
	}
	return Result{Admitted: true, InFlight: held, Max: l.max}, l.lease(key, id, true), nil
}

// nextID numbers leases, unique within the process.
var nextID atomic.Uint64

// A Lease is a slot taken by Acquire. Release it exactly once when the
// request ends, in a defer: a lease never released is renewed as long as
// the process runs.
type Lease struct {
	l      *Limiter
	key    string
	id     uint64
	stored bool // the store holds it: it is renewed and released there

	released atomic.Bool

	// Guarded by l.mu: the renewal tick at which it was taken or last
	// renewed, and its place in the ring of held leases.
	mark       uint64
	prev, next *Lease
}

func (l *Limiter) lease(key string, id uint64, stored bool) *Lease {
	x := &Lease{l: l, key: key, id: id, stored: stored}
	l.inFlight.Add(1)
	if stored {
		l.track(x)
	}
	return x
}

// Release gives the slot back. It is safe to call on a nil lease, and a
// second call does nothing. When the store fails to release it, the slot
// stays taken until the lease's TTL has passed (the failure is logged
// once per episode).
func (x *Lease) Release() {
	if x == nil || !x.released.CompareAndSwap(false, true) {
		return
	}
	l := x.l
	l.inFlight.Add(-1)
	if !x.stored {
		return
	}
	l.untrack(x)
	if err := l.store.Release(context.Background(), l.name, x.key, x.id); err != nil {
		l.failed(err)
		return
	}
	l.answered()
}

// track adds x to the leases to renew, and starts renewing.
func (l *Limiter) track(x *Lease) {
	l.mu.Lock()
	x.mark = l.ticks
	x.prev, x.next = l.held.prev, &l.held
	l.held.prev.next = x
	l.held.prev = x
	start := !l.renewing && !l.manual
	l.renewing = true
	l.mu.Unlock()
	if start {
		go l.renewLoop()
	}
}

// untrack removes x from the leases to renew, if it is there: a renewal
// that found it expired has removed it already.
func (l *Limiter) untrack(x *Lease) {
	l.mu.Lock()
	if x.prev != nil {
		x.prev.next, x.next.prev = x.next, x.prev
		x.prev, x.next = nil, nil
	}
	l.mu.Unlock()
}

// renewLoop renews the leases held every quarter of the TTL, and ends
// when none is held.
func (l *Limiter) renewLoop() {
	t := time.NewTicker(l.ttl / 4)
	defer t.Stop()
	for range t.C {
		if !l.renewDue() {
			return
		}
	}
}

// renewDue runs on each tick, every quarter of the TTL: it renews the
// leases taken or renewed two ticks ago or more (more than a quarter of
// the TTL ago, at most half), so that none goes longer than half its TTL
// unrenewed, and reports whether any lease is held; when none is,
// renewing stops. Ticks spare the hot path a reading of the clock.
func (l *Limiter) renewDue() bool {
	l.mu.Lock()
	if l.held.next == &l.held {
		l.renewing = false
		l.mu.Unlock()
		return false
	}
	l.ticks++
	due := l.due[:0]
	for x := l.held.next; x != &l.held; x = x.next {
		if x.mark+2 <= l.ticks {
			x.mark = l.ticks
			due = append(due, x)
		}
	}
	l.mu.Unlock()
	// A few calls at once, so that many long requests on a remote store
	// are renewed within the tick.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(due), renewers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(due)); i = next.Add(1) - 1 {
				l.renew(due[i])
			}
		}()
	}
	wg.Wait()
	clear(due)
	l.mu.Lock()
	l.due = due[:0]
	l.mu.Unlock()
	return true
}

// renewers bounds the renewals in flight at once.
const renewers = 8

// renew renews x unless it was released meanwhile. A lease that expired
// (held false) is not added again: its request goes on uncounted, as one
// admitted failing open.
func (l *Limiter) renew(x *Lease) {
	if x.released.Load() {
		return
	}
	held, err := l.store.Renew(context.Background(), l.name, x.key, x.id, l.ttl)
	if err != nil {
		l.failed(err)
		return
	}
	l.answered()
	if !held {
		l.untrack(x) // expired, or never stored: nothing left to renew
	}
}

// failed counts a store failure, logged when an episode starts.
func (l *Limiter) failed(err error) {
	if start, _ := l.failures.Fail(); start {
		mode := "admitting requests (fail open)"
		if l.failClosed {
			mode = "refusing requests (fail closed)"
		}
		l.log.Warn("ratekit: concurrency store failing, "+mode, "limiter", l.name, "error", err)
	}
}

// answered ends the store's failure episode, if any.
func (l *Limiter) answered() {
	if end, n := l.failures.Recover(); end {
		l.log.Info("ratekit: concurrency store answering again", "limiter", l.name, "failed_calls", n)
	}
	if l.hasOrphans.Load() {
		l.releaseOrphans()
	}
}

// An orphan is a lease that may be in the store with no holder.
type orphan struct {
	key string
	id  uint64
}

// maxOrphans bounds the orphans kept for release: a store that fails
// for long leaves many, which their TTL frees.
const maxOrphans = 4096

func (l *Limiter) orphan(key string, id uint64) {
	l.orphanMu.Lock()
	if len(l.orphans) < maxOrphans {
		l.orphans = append(l.orphans, orphan{key, id})
		l.hasOrphans.Store(true)
	}
	l.orphanMu.Unlock()
}

// releaseOrphans releases the orphans, in the background: the store
// answered a call sent after their acquires, so it has run those.
func (l *Limiter) releaseOrphans() {
	l.orphanMu.Lock()
	os := l.orphans
	l.orphans = nil
	l.hasOrphans.Store(false)
	l.orphanMu.Unlock()
	if len(os) == 0 {
		return
	}
	go func() {
		for _, o := range os {
			_ = l.store.Release(context.Background(), l.name, o.key, o.id)
		}
	}()
}

// checkName applies the rule of core's limit names.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: concurrency name %.20q must be 1 to 64 bytes", core.ErrInvalidLimit, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(core.NameSymbols, c) >= 0) {
			return fmt.Errorf("%w: concurrency name %q: character %q not allowed (use letters, digits and %s)", core.ErrInvalidLimit, name, c, core.NameSymbols)
		}
	}
	return nil
}
