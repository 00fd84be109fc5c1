package demo

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

// Routes is what every program serves, built once from the flags: the
// limiters of the routes, what the keys are made of, and the handlers of
// the routes that do more than answer a fixed text. A program's router
// mounts them with its own ratekit middleware (see StdHTTP for net/http):
//
//	GET  /          Hello, behind Main (or Rules) keyed by Key
//	GET  /healthz   OK, never limited
//	GET  /metrics   Metrics, never limited; absent when nil
//	POST /login     LoggedIn, behind Login keyed by client IP, then Rules
//	POST /orders    Orders.Place, behind authentication (Authenticate, Refuse),
//	                then Orders.Limiter with the queue Orders.Offer
//	POST /reports   Reports.Build, behind Reports.Limiter then Reports.InFlight
//	GET  /upstream  Upstream, not limited itself
//	anything else   NotFound (404), behind Main (or Rules) as GET /
//
// With InFlight not nil (-elastic), a concurrency middleware of InFlight
// wraps every route. Every router serves HEAD where it serves GET.
type Routes struct {
	Main      *core.Limiter        // GET / and every other request; nil with -config
	Login     *core.Limiter        // POST /login, per client IP
	Rules     *rules.Engine        // with -config: decides GET / (Main is then nil) and also POST /login
	Key       string               // the -key flag: ip, header:NAME or query:NAME (see PickKey)
	IPOptions []keyfuncs.IPOption  // of the client-IP key: -trusted-proxies and -ipv6-prefix
	Headers   answer.Style         // the -headers flag, an option of every middleware
	Metrics   http.Handler         // GET /metrics; nil without -metrics
	InFlight  *concurrency.Limiter // with -elastic: counts the requests in flight on every route (elastic.go)
	Orders    *Orders              // POST /orders (orders.go)
	Reports   *Reports             // POST /reports (reports.go)
	Upstream  *Upstream            // GET /upstream (upstream.go)
	Timeouts  Timeouts             // of the program's server: DefaultTimeouts but in tests
}

// The content type and bodies of the answers.
const (
	TextPlain = "text/plain; charset=utf-8"
	Hello     = "hello\n"
	OK        = "ok\n"
	LoggedIn  = "logged in\n"
	NotFound  = "404 page not found\n" // what http.NotFound writes
)

// GetHead are the methods of the GET routes, for routers that route HEAD
// apart.
var GetHead = []string{http.MethodGet, http.MethodHead}

// RoutePaths are the paths of the routes, and "/*" for every other path:
// a router that answers 405 for another method on a route's path (Echo)
// routes the other requests of each to the 404 of every other request.
var RoutePaths = []string{"/*", "/", "/healthz", "/metrics", "/login", "/orders", "/reports", "/upstream"}

// PickKey returns the key the -key flag names, made with the
// constructors of one framework's middleware: ip for "ip", header for
// "header:NAME", query for "query:NAME".
func PickKey[K any](spec string, ip K, header, query func(name string) K) K {
	kind, name, _ := strings.Cut(spec, ":")
	switch kind {
	case "header":
		return header(name)
	case "query":
		return query(name)
	}
	return ip
}

// TextHandler is the net/http handler that answers body as TextPlain.
func TextHandler(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", TextPlain)
		_, _ = w.Write([]byte(body))
	}
}

// loginLimit is the strict limit of POST /login.
var loginLimit = core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}

// routes builds the limiters and the metrics handler, with newMetrics for
// -metrics. clock, if not nil, is the clock of the stores (for tests).
// shared is the store of -store redis or hybrid (sharedStore), nil in
// memory. log is the limiters' logger: of store failures, and of the
// resets and grants of -admin.
func (c *config) routes(newMetrics NewMetrics, clock func() time.Time, shared core.Store, log *slog.Logger) (*Routes, error) {
	// In memory, each limiter gets its own store. In Redis the two limits
	// share one store and are kept apart by their names, "demo" and
	// "login"; every demo server on the same Redis shares them.
	limits := []core.Limit{c.limit, loginLimit}
	stores := []core.Store{shared, shared}
	withRules := c.rulesFile != "" || c.rulesRedis != nil
	var tracked []MemoryLimit
	for i := range stores {
		if shared == nil {
			s := &core.MemoryStore{Clock: clock}
			stores[i] = s
			if i > 0 || !withRules { // the rules' limits are tracked by TrackRules
				tracked = append(tracked, MemoryLimit{Store: s, Limit: limits[i]})
			}
		}
	}
	var metrics Metrics
	limOpts := []core.Option{core.WithLogger(log)}
	if c.failClosed {
		limOpts = append(limOpts, core.WithFailClosed())
	}
	if c.metrics {
		var err error
		if metrics, err = newMetrics(c.store, tracked); err != nil {
			return nil, err
		}
		limOpts = append(limOpts, core.WithObserver(metrics.Observe))
	}
	loginLim, err := core.NewLimiter(loginLimit, append([]core.Option{core.WithStore(stores[1])}, limOpts...)...)
	if err != nil {
		return nil, err
	}
	rt := &Routes{Login: loginLim, Key: c.key, IPOptions: c.ipOptions, Headers: c.headers}
	if withRules {
		// The rules' limits live in the store of GET /: in Redis, shared
		// by every demo server on it, under names of their own.
		rt.Rules, err = rules.NewEngine(rules.WithStore(stores[0]), rules.WithClientIP(c.ipOptions...), rules.WithLimiterOptions(limOpts...))
		if err != nil {
			return nil, err
		}
		if metrics != nil {
			if err := metrics.TrackRules(rt.Rules); err != nil {
				return nil, err
			}
		}
	} else {
		opts := append([]core.Option{core.WithStore(stores[0])}, limOpts...)
		if c.elastic > 0 {
			if rt.InFlight, err = inFlightLimiter(log); err != nil {
				return nil, err
			}
			opts = append(opts, core.WithElastic(c.elastic, rt.InFlight.Spare(c.elasticInFlight)))
		}
		if rt.Main, err = core.NewLimiter(c.limit, opts...); err != nil {
			if c.store == "hybrid" && errors.Is(err, core.ErrInvalidLimit) {
				// The limit is valid (parseFlags checked it): the hybrid
				// store refuses its algorithm.
				return nil, cli.Usagef("-algorithm %s with -store hybrid: %w", c.limit.Algorithm, err)
			}
			return nil, err
		}
	}
	if metrics != nil {
		rt.Metrics = metrics.Handler()
	}
	return rt, nil
}

// Metrics gathers the decisions of the demo's limiters, for -metrics, and
// serves them at GET /metrics.
type Metrics interface {
	// Observe is the observer of every limiter (core.WithObserver).
	Observe(core.Event)
	// TrackRules follows the rules of -config, whose limits a reload
	// may replace.
	TrackRules(*rules.Engine) error
	// Handler serves the metrics gathered.
	Handler() http.Handler
}

// NewMetrics makes the metrics of a demo server whose limiters are on
// store (the -store flag: memory, redis or hybrid). memory are the limits
// that have a memory store of their own, whose keys the metrics count.
type NewMetrics func(store string, memory []MemoryLimit) (Metrics, error)

// MemoryLimit is a limit and the memory store that holds its keys alone.
type MemoryLimit struct {
	Store *core.MemoryStore
	Limit core.Limit
}
