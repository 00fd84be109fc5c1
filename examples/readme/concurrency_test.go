package readme

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// The concurrency snippet, served: 4 reports of one client run at once,
// the 5th is refused with 429 and Retry-After, another client's runs, and
// a slot is back when a report ends.
func TestConcurrencySnippet(t *testing.T) {
	inside, release := make(chan struct{}, 8), make(chan struct{})
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-release
	})
	h, err := reportsAPI(report)
	require.NoError(t, err)
	post := func(ip string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/reports", nil)
		r.RemoteAddr = ip + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); assert.Equal(t, http.StatusOK, post("192.0.2.1").Code) }()
	}
	for range 4 {
		<-inside
	}
	w := post("192.0.2.1")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	var p struct{ Limit string }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, "reports", p.Limit)
	assert.NotEmpty(t, w.Header().Get("X-Ratelimit-Remaining"), "the rate limit decided it first")

	close(release)
	assert.Equal(t, http.StatusOK, post("192.0.2.2").Code, "another client")
	wg.Wait()
	assert.Equal(t, http.StatusOK, post("192.0.2.1").Code, "slots back")
}

// The Redis snippet: two servers' limiters share the 4 slots of a client.
func TestConcurrencyRedisSnippet(t *testing.T) {
	srv := redistest.Start(t)
	a, err := sharedReports(srv.Client(t))
	require.NoError(t, err)
	b, err := sharedReports(srv.Client(t))
	require.NoError(t, err)
	ctx := context.Background()
	var leases []*concurrency.Lease
	for _, lim := range []*concurrency.Limiter{a, b, a, b} {
		r, lease, err := lim.Acquire(ctx, "client")
		require.NoError(t, err)
		require.True(t, r.Admitted)
		leases = append(leases, lease)
	}
	r, _, err := b.Acquire(ctx, "client")
	require.NoError(t, err)
	assert.False(t, r.Admitted, "the 5th, on either server, is refused")
	assert.Equal(t, 4, r.InFlight)
	for _, l := range leases {
		l.Release()
	}
}

// The framework one-liners: each route answers, and refuses a client
// whose slots are all taken.
func TestConcurrencyFrameworkSnippets(t *testing.T) {
	for name, c := range map[string]struct {
		key   string // the PeerIP key of a test request
		serve func(*concurrency.Limiter) func(*http.Request) int
	}{
		"gin": {"192.0.2.1", func(l *concurrency.Limiter) func(*http.Request) int {
			return recorded(concurrencyGin(l, func(c *gin.Context) { c.Status(http.StatusOK) }))
		}},
		"echo": {"192.0.2.1", func(l *concurrency.Limiter) func(*http.Request) int {
			return recorded(concurrencyEcho(l, func(c echo.Context) error { return c.NoContent(http.StatusOK) }))
		}},
		"chi": {"192.0.2.1", func(l *concurrency.Limiter) func(*http.Request) int {
			return recorded(concurrencyChi(l, func(http.ResponseWriter, *http.Request) {}))
		}},
		"fiber": {"0.0.0.0", func(l *concurrency.Limiter) func(*http.Request) int {
			app := concurrencyFiber(l, func(c *fiber.Ctx) error { return c.SendStatus(http.StatusOK) })
			return func(r *http.Request) int {
				res, err := app.Test(r, -1)
				require.NoError(t, err)
				return res.StatusCode
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			lim, err := concurrency.NewLimiter(4, concurrency.WithName("reports"))
			require.NoError(t, err)
			serve := c.serve(lim)
			post := func() int { return serve(httptest.NewRequest(http.MethodPost, "/reports", nil)) }
			assert.Equal(t, http.StatusOK, post())
			var leases []*concurrency.Lease
			for range 4 { // four reports of the client running
				_, lease, err := lim.Acquire(context.Background(), c.key)
				require.NoError(t, err)
				leases = append(leases, lease)
			}
			assert.Equal(t, http.StatusTooManyRequests, post())
			leases[0].Release()
			assert.Equal(t, http.StatusOK, post())
			for _, l := range leases[1:] {
				l.Release()
			}
		})
	}
}

func recorded(h http.Handler) func(*http.Request) int {
	return func(r *http.Request) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
}

// The elastic snippet: 200 requests a minute while fewer than 200 are in
// flight; the in-flight limiter refuses none.
func TestConcurrencyElasticSnippet(t *testing.T) {
	h, err := elasticOnInFlight(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	require.NoError(t, err)
	codes := map[int]int{}
	for range 201 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		codes[w.Code]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 200, http.StatusTooManyRequests: 1}, codes)
}
