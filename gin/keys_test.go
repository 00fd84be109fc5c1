package ratekitgin_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
)

// TestKeys: what the scenarios (TestScenarios) do not ask of Gin's key
// functions. ClientIP, Gin's own client address, on engines configured
// safely: the peer unless it is a trusted proxy, whatever a client forges.
// The RemoteAddr forms of net/http: a Unix socket's (400), and one that a
// handler in front of the engine rewrote from a header, without a port, as
// gorilla's handlers.ProxyHeaders does (refused: 500). Adapt; ContextValue,
// whose keys may be of any type; and the misuses that fail every request.
func TestKeys(t *testing.T) {
	trusting := func(cidrs ...string) *gin.Engine {
		r := gin.New()
		require.NoError(t, r.SetTrustedProxies(cidrs))
		return r
	}
	none, proxies, off := trusting(), trusting("10.0.0.0/8"), gin.New()
	off.ForwardedByClientIP = false // headers off: safe while every peer is "trusted"
	clientIP := func(r *gin.Engine) ratekitgin.Key {
		key, err := ratekitgin.ClientIP(r)
		require.NoError(t, err)
		return key
	}
	ip, err := ratekitgin.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	_, err = ratekitgin.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
	type ctxKey struct{}

	for _, tc := range []struct {
		name   string
		engine *gin.Engine // nil: gin.New()
		key    ratekitgin.Key
		peer   string
		xff    string // X-Forwarded-For and X-Real-IP
		want   string
		err    error  // what the error wraps
		msg    string // what it says
	}{
		{"ClientIP, no proxies", none, clientIP(none), "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, ""},
		{"ClientIP, a peer not a proxy", proxies, clientIP(proxies), "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, ""},
		{"ClientIP via a proxy", proxies, clientIP(proxies), "10.0.0.2:4711", "1.1.1.1, 198.51.100.4, 10.0.0.9", "198.51.100.4", nil, ""},
		{"ClientIP via a proxy, IPv6", proxies, clientIP(proxies), "10.0.0.2:4711", "2001:db8:1:2::77", "2001:db8:1:2::/64", nil, ""},
		{"ClientIP via an IPv6 peer", proxies, clientIP(proxies), "[2001:db8:1:2::7]:4711", "1.1.1.1", "2001:db8:1:2::/64", nil, ""},
		{"ClientIP, headers off", off, clientIP(off), "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, ""},
		{"ClientIP, a Unix socket", none, clientIP(none), "@unix", "", "", keyfuncs.ErrMissing, ""},
		{"PeerIP, a Unix socket", nil, ratekitgin.PeerIP, "@unix", "", "", keyfuncs.ErrMissing, ""},
		{"ClientIP, RemoteAddr rewritten", none, clientIP(none), "198.51.100.7", "198.51.100.7", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"PeerIP, RemoteAddr rewritten", nil, ratekitgin.PeerIP, "198.51.100.7", "198.51.100.7", "", keyfuncs.ErrMisconfigured, ""},
		{"IP, RemoteAddr rewritten", nil, ip, "198.51.100.7", "198.51.100.7", "", keyfuncs.ErrMisconfigured, ""},
		{"Adapt", nil, ratekitgin.Adapt(keyfuncs.Query("api_key")), "203.0.113.7:1", "", "q-1", nil, ""},
		{"Adapt, no value", nil, ratekitgin.Adapt(keyfuncs.Query("other")), "203.0.113.7:1", "", "", keyfuncs.ErrMissing, ""},
		{"Adapt(nil)", nil, ratekitgin.Adapt(nil), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{`Header("")`, nil, ratekitgin.Header(""), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{"ContextValue of a struct key", nil, ratekitgin.ContextValue(ctxKey{}), "203.0.113.7:1", "", "42", nil, ""},
		{"User (ContextValue) of a float", nil, ratekitgin.User("user"), "203.0.113.7:1", "", "", nil, `ratekitgin: c.Get("user") has unsupported type float64`},
		{"ContextValue(nil)", nil, ratekitgin.ContextValue(nil), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := tc.engine
			if engine == nil {
				engine = gin.New()
			}
			c := gin.CreateTestContextOnly(httptest.NewRecorder(), engine)
			c.Request = httptest.NewRequest(http.MethodGet, "/?api_key=q-1", nil)
			c.Request.RemoteAddr = tc.peer
			if tc.xff != "" {
				c.Request.Header.Set("X-Forwarded-For", tc.xff)
				c.Request.Header.Set("X-Real-IP", tc.xff)
			}
			c.Set(ctxKey{}, 42)
			c.Set("user", 1.5)
			k, err := tc.key(c)
			assert.Equal(t, tc.want, k)
			switch {
			case tc.err != nil:
				assert.ErrorIs(t, err, tc.err)
			case tc.msg != "":
				assert.NotErrorIs(t, err, keyfuncs.ErrMissing, "a server error")
			default:
				assert.NoError(t, err)
			}
			if tc.msg != "" {
				assert.ErrorContains(t, err, tc.msg)
			}
		})
	}
}

// TestClientIPRefusesUnsafeEngines: on an engine that would take the
// client address from a header any client sends, ClientIP returns an
// error naming the setting to change, and no key.
func TestClientIPRefusesUnsafeEngines(t *testing.T) {
	engine := func(configure ...func(*gin.Engine)) *gin.Engine {
		r := gin.New()
		for _, f := range configure {
			f(r)
		}
		return r
	}
	trust := func(cidrs ...string) func(*gin.Engine) {
		return func(r *gin.Engine) { require.NoError(t, r.SetTrustedProxies(cidrs)) }
	}
	for _, tt := range []struct {
		name   string
		engine *gin.Engine
		want   []string
	}{
		{"gin.Default", gin.Default(), []string{"SetTrustedProxies", "ForwardedByClientIP", "192.0.2.1", "X-Forwarded-For"}},
		{"gin.New", gin.New(), []string{"SetTrustedProxies", "X-Forwarded-For"}},
		{"X-Real-IP only", engine(func(r *gin.Engine) { r.RemoteIPHeaders = []string{"X-Real-IP"} }), []string{"SetTrustedProxies", "X-Real-Ip"}},
		{"custom header", engine(func(r *gin.Engine) { r.RemoteIPHeaders = []string{"X-Client-Addr"} }), []string{"X-Client-Addr"}},
		{"all IPv4", engine(trust("0.0.0.0/0")), []string{"SetTrustedProxies", "192.0.2.1"}},
		{"all IPv6", engine(trust("10.0.0.0/8", "::/0")), []string{"SetTrustedProxies", "2001:db8::1"}},
		{"platform", engine(trust(), func(r *gin.Engine) { r.TrustedPlatform = gin.PlatformCloudflare }),
			[]string{"TrustedPlatform", `"CF-Connecting-IP"`, "ratekitgin.IP"}},
		{"app engine", engine(trust(), func(r *gin.Engine) { r.AppEngine = true }), []string{"AppEngine"}},
		{"nil", nil, []string{"nil engine"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ratekitgin.ClientIP(tt.engine)
			require.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
			assert.Nil(t, key)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestClientIPAfterLateChanges: the engine's proxy settings changed after
// ClientIP checked them, on a real server at a limit of 3 a minute. A
// change that would let clients choose their key (every peer a trusted
// proxy, or a TrustedPlatform) is not honoured: 20 requests, each forging
// another address in X-Forwarded-For, X-Real-IP and CF-Connecting-IP, get
// 3 through (keyed by the TCP peer), and slog.Default() has one line that
// says so. A later safe change, the test's own loopback address as the
// only proxy, is followed: each forwarded address is its own client, and
// one line says the episode ended, with its 20 requests.
func TestClientIPAfterLateChanges(t *testing.T) {
	for _, tt := range []struct {
		name   string
		loosen func(r *gin.Engine)
	}{
		{"SetTrustedProxies 0.0.0.0/0", func(r *gin.Engine) { require.NoError(t, r.SetTrustedProxies([]string{"0.0.0.0/0"})) }},
		{"TrustedPlatform Cloudflare", func(r *gin.Engine) { r.TrustedPlatform = gin.PlatformCloudflare }},
		{"ForwardedByClientIP on a trust-all engine", func(r *gin.Engine) { r.ForwardedByClientIP = true }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log lockedBuffer
			prev := slog.Default()
			slog.SetDefault(adaptertest.NewLogger(&log))
			t.Cleanup(func() { slog.SetDefault(prev) })

			r := gin.New()
			if tt.name == "ForwardedByClientIP on a trust-all engine" {
				r.ForwardedByClientIP = false // Gin's default trust of every peer, its headers off
			} else {
				require.NoError(t, r.SetTrustedProxies(nil))
			}
			key, err := ratekitgin.ClientIP(r)
			require.NoError(t, err)
			lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
			r.Use(ratekitgin.New(lim, key))
			r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			srv := httptest.NewServer(r)
			defer srv.Close()

			tt.loosen(r)
			assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 17}, forgedStatuses(t, srv.URL, 0, 20))
			assert.Equal(t, 1, strings.Count(log.String(), "keying by the TCP peer"), log.String())
			assert.Contains(t, log.String(), "level=ERROR")

			r.TrustedPlatform, r.ForwardedByClientIP = "", true
			require.NoError(t, r.SetTrustedProxies([]string{"127.0.0.1"}))
			assert.Equal(t, map[int]int{http.StatusOK: 5}, forgedStatuses(t, srv.URL, 20, 5), "followed: each forwarded address a client")
			assert.Equal(t, 1, strings.Count(log.String(), "settings are safe again"), log.String())
			assert.Contains(t, log.String(), "peer_keyed_requests=20")
		})
	}
}

// TestClientIPAllocations: comparing the engine's settings on each
// request costs no allocation: the key allocates what c.ClientIP() does
// (Gin parses the peer's address with net.ParseIP), and nothing more.
func TestClientIPAllocations(t *testing.T) {
	r := gin.New()
	require.NoError(t, r.SetTrustedProxies([]string{"10.0.0.0/8"}))
	key, err := ratekitgin.ClientIP(r)
	require.NoError(t, err)
	c := gin.CreateTestContextOnly(httptest.NewRecorder(), r)
	c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
	c.Request.RemoteAddr = "10.0.0.2:4711"
	c.Request.Header.Set("X-Forwarded-For", "198.51.100.4")
	k, err := key(c)
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.4", k)
	assert.Equal(t, testing.AllocsPerRun(100, func() { _ = c.ClientIP() }), testing.AllocsPerRun(100, func() { _, _ = key(c) }))
}

// forgedStatuses sends n requests to url, the i-th forging the address
// 198.51.100.(from+i) in X-Forwarded-For, X-Real-IP and CF-Connecting-IP,
// and counts their statuses.
func forgedStatuses(t *testing.T, url string, from, n int) map[int]int {
	got := map[int]int{}
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		ip := "198.51.100." + strconv.Itoa(from+i+1)
		for _, h := range []string{"X-Forwarded-For", "X-Real-IP", "CF-Connecting-IP"} {
			req.Header.Set(h, ip)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		got[res.StatusCode]++
	}
	return got
}

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
