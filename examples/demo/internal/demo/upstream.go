package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
)

// GET /upstream calls an upstream provider, as a service calls an API
// that limits its callers, through a client Transport that paces its
// requests with a ratekit limiter (client.WithLimiter): a token bucket of
// 5 requests a second, bursts of 2, per provider host. When the bucket is
// empty a request waits for its turn, at most 5 s, instead of reaching the
// provider to be answered 429. The bucket is in memory or, with -store
// redis or hybrid, in the -redis server, where every demo server on that
// Redis shares it: together they call a provider no faster than 5 a
// second.
//
// The provider is -upstream URL or, by default, one the demo serves
// itself on a loopback port: net/http limited by ratekit to 5 requests a
// second with bursts of 5, for all its callers together. Its burst is
// larger than the pacer's, so that a request spaced by the pacer and
// delayed on its way (by up to 3/5 s) still finds a token.
//
// The route answers with the provider's status, and says it in the body
// with the time the request waited for its turn. A request that gets no
// turn within 5 s is answered 503 with Retry-After; a provider that
// cannot be reached, 502 (logged once per episode).

// upstreamLimit paces the calls to a provider host; providerLimit is the
// limit of the demo's own provider.
var (
	upstreamLimit = core.Limit{Name: "upstream", Algorithm: core.TokenBucket, Rate: core.PerSecond(5), Burst: 2}
	providerLimit = core.Limit{Name: "provider", Algorithm: core.TokenBucket, Rate: core.PerSecond(5)}
)

// Bounds of a call to the provider: the wait for a turn and the call
// together, and the provider's body read (and dropped).
const (
	upstreamTimeout = 5 * time.Second
	maxUpstreamBody = 64 << 10
)

// providerOK is the answer of the demo's provider.
const providerOK = "provider: ok\n"

// Upstream is the GET /upstream route: an http.Handler.
type Upstream struct {
	url       string
	client    *http.Client
	transport *http.Transport  // under the pacing Transport, closed with the route
	now       func() time.Time // the pacing Transport's clock
	log       *slog.Logger
	failures  episode.Log // of calls that reach no provider

	provider *http.Server  // the demo's own provider; nil with -upstream
	served   chan struct{} // closed when the provider has stopped
}

// parseUpstream validates -upstream.
func (c *config) parseUpstream(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cli.Usagef("-upstream %q: want an http:// or https:// URL, such as http://127.0.0.1:8081/", s)
	}
	c.upstreamURL = s
	return nil
}

// upstream builds the route and, without -upstream, starts the demo's
// provider on a loopback port. clock, if not nil, is the clock of the
// memory stores of the pacer and of the provider, and sleep, if not nil,
// the clock of the pacing Transport (for tests); exact is the Redis store
// of the pacer (exactStore), nil in memory. Close it with close.
func (c *config) upstream(ctx context.Context, clock func() time.Time, sleep client.Clock, exact *redisstore.Store, log *slog.Logger) (*Upstream, error) {
	var store core.Store // not a nil *redisstore.Store
	if exact != nil {
		store = exact
	}
	pace, err := c.newLimiter(upstreamLimit, clock, store, log)
	if err != nil {
		return nil, err
	}
	u := &Upstream{url: c.upstreamURL, now: time.Now, log: log,
		transport: http.DefaultTransport.(*http.Transport).Clone()}
	if sleep != nil {
		u.now = sleep.Now
	}
	rt, err := client.New(u.transport, client.WithLimiter(pace, nil), client.WithClock(sleep))
	if err != nil {
		return nil, err
	}
	u.client = &http.Client{Transport: rt}
	if u.url != "" {
		return u, nil
	}
	limit, err := c.newLimiter(providerLimit, clock, nil, log)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the provider of GET /upstream: %w", err)
	}
	all := func(*http.Request) (string, error) { return "all", nil } // one quota for all callers
	u.provider = DefaultTimeouts.Server(stdhttp.New(limit, all)(TextHandler(providerOK)))
	u.served = make(chan struct{})
	go func() {
		defer close(u.served)
		_ = u.provider.Serve(ln) // http.ErrServerClosed
	}()
	u.url = "http://" + ln.Addr().String() + "/"
	return u, nil
}

// close stops the demo's provider, if any, and closes the idle
// connections to the provider.
func (u *Upstream) close() {
	u.transport.CloseIdleConnections()
	if u.provider != nil {
		_ = u.provider.Close()
		<-u.served
	}
}

// ServeHTTP calls the provider, paced, and answers its status and the
// time the call waited for its turn.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), upstreamTimeout)
	defer cancel()
	// The Transport asks the pacer before each attempt, and the next
	// Transport gets a connection once it is admitted: the wait for the
	// turn ends there. (Both run in this goroutine.)
	begin := u.now()
	var sent time.Time
	attempts := 0
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: func(string) {
		if attempts++; attempts == 1 {
			sent = u.now()
		}
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil { // parseUpstream checked the URL
		http.Error(w, "upstream: bad URL", http.StatusInternalServerError)
		return
	}
	resp, err := u.client.Do(req)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return // the client went away
	case attempts == 0 && (errors.Is(err, client.ErrLimited) || errors.Is(err, context.DeadlineExceeded)):
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("upstream: no turn within %s", upstreamTimeout), http.StatusServiceUnavailable)
		return
	case errors.Is(err, context.DeadlineExceeded):
		http.Error(w, fmt.Sprintf("upstream: no answer within %s", upstreamTimeout), http.StatusGatewayTimeout)
		return
	default:
		if start, n := u.failures.Fail(); start {
			u.log.Warn("demo: the provider of GET /upstream does not answer", "url", u.url, "err", err, "failures", n)
		}
		http.Error(w, "upstream: unreachable", http.StatusBadGateway)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUpstreamBody))
	resp.Body.Close()
	if end, n := u.failures.Recover(); end {
		u.log.Info("demo: the provider of GET /upstream answers again", "failures", n)
	}
	note := ""
	if attempts > 1 {
		note = fmt.Sprintf(" (%d attempts)", attempts)
	}
	w.Header().Set("Content-Type", TextPlain)
	w.WriteHeader(resp.StatusCode)
	_, _ = fmt.Fprintf(w, "upstream: %s after waiting %s for its turn%s\n", resp.Status, sent.Sub(begin).Round(time.Millisecond), note)
}
