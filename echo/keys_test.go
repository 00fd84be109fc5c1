package ratekitecho_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/keyfuncs"
)

// extracting returns an Echo instance with the client-address extractor x.
func extracting(x echo.IPExtractor) *echo.Echo {
	e := echo.New()
	e.IPExtractor = x
	return e
}

// ipNet parses a CIDR prefix for Echo's trust options.
func ipNet(cidr string) *net.IPNet {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	return n
}

// only returns Echo's trust options that trust the proxies of cidr and no
// others, its default trust of private ranges turned off.
func only(cidr string) []echo.TrustOption {
	return []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false), echo.TrustIPRange(ipNet(cidr))}
}

// TestForgedHeaders: at a limit of 3, six requests of one client that
// rotates X-Forwarded-For and X-Real-IP get 3 through under every safe
// setting (a Config without Key, whose default is PeerIP, among them), and
// none (500) where ClientIP refuses e.IPExtractor, with an error, logged,
// that says what to change. Each Echo instance keeps its own verdict: each
// is served in turn with a safe one, which keeps its 3.
func TestForgedHeaders(t *testing.T) {
	ip, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	_, err = ratekitecho.IP(keyfuncs.TrustedProxies("not-an-ip"))
	assert.Error(t, err)
	realIP := func(r *http.Request) string { return r.Header.Get("X-Real-IP") }
	believer := echo.ExtractIPFromXFFHeader(echo.TrustIPRange(ipNet("0.0.0.0/0")))
	for _, tt := range []struct {
		name    string
		extract echo.IPExtractor
		key     ratekitecho.Key
		peer    string
		refused []string // what ClientIP's error says; none where the setting is safe
	}{
		{"PeerIP, Echo's default", nil, ratekitecho.PeerIP, "203.0.113.7:4711", nil},
		{"Config without Key (PeerIP)", nil, nil, "203.0.113.7:4711", nil},
		{"IP via proxy", nil, ip, "10.0.0.2:4711", nil},
		{"IP ignores e.IPExtractor", believer, ip, "203.0.113.7:4711", nil},
		{"ClientIP, ExtractIPDirect", echo.ExtractIPDirect(), ratekitecho.ClientIP, "203.0.113.7:4711", nil},
		{"ClientIP, ExtractIPDirect, IPv6", echo.ExtractIPDirect(), ratekitecho.ClientIP, "[2001:db8:1:2::7]:4711", nil},
		{"ClientIP, own proxies", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), ratekitecho.ClientIP, "203.0.113.7:4711", nil},
		{"ClientIP, own proxies, via proxy", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), ratekitecho.ClientIP, "10.0.0.2:4711", nil},
		{"ClientIP, XFF with Echo's default trust", echo.ExtractIPFromXFFHeader(), ratekitecho.ClientIP, "203.0.113.7:4711", nil},
		{"ClientIP, Echo's default", nil, ratekitecho.ClientIP, "203.0.113.7:4711",
			[]string{"e.IPExtractor is nil", "echo.ExtractIPDirect()", "TrustIPRange"}},
		{"ClientIP, X-Real-IP from anyone", realIP, ratekitecho.ClientIP, "203.0.113.7:4711", []string{"e.IPExtractor", "X-Real-Ip", "192.0.2.1"}},
		{"ClientIP, XFF trusting every IPv4 peer", believer, ratekitecho.ClientIP, "203.0.113.7:4711",
			[]string{"e.IPExtractor", "X-Forwarded-For", "192.0.2.1"}},
		{"ClientIP, X-Real-IP trusting every IPv6 peer", echo.ExtractIPFromRealIPHeader(echo.TrustIPRange(ipNet("::/0"))), ratekitecho.ClientIP,
			"203.0.113.7:4711", []string{"e.IPExtractor", "X-Real-Ip", "2001:db8::1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			e, safe := serving(t, tt.extract, tt.key, &log), serving(t, echo.ExtractIPDirect(), ratekitecho.ClientIP, io.Discard)
			got, gotSafe := map[int]int{}, map[int]int{}
			for i := range 6 {
				got[forged(e, tt.peer, i)]++
				gotSafe[forged(safe, "203.0.113.7:4711", i)]++
			}
			want := map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}
			assert.Equal(t, want, gotSafe, "a safe instance, served in turn")
			if tt.refused != nil {
				want = map[int]int{http.StatusInternalServerError: 6}
			}
			assert.Equal(t, want, got)
			for _, w := range tt.refused {
				assert.Contains(t, log.String(), w)
			}
		})
	}
}

// serving returns an Echo instance with the extractor x and one route
// limited to 3 requests a minute by key (the Config's default when nil),
// logging to log.
func serving(t *testing.T, x echo.IPExtractor, key ratekitecho.Key, log io.Writer) *echo.Echo {
	lim := adaptertest.Limiter(t, storetest.NewClock(storetest.Epoch), core.Limit{Algorithm: core.FixedWindow, Rate: core.PerMinute(3)})
	e := extracting(x)
	e.Use(ratekitecho.NewWithConfig(ratekitecho.Config{Limiter: lim, Key: key, Logger: adaptertest.NewLogger(log)}))
	e.GET("/", ok)
	return e
}

// forged sends e the client's request i from peer, with forged
// X-Forwarded-For and X-Real-IP, different for each i (or, from the proxy
// at 10.0.0.2, with the client's address appended to X-Forwarded-For and
// written over X-Real-IP, as a proxy does), and returns its status.
func forged(e *echo.Echo, peer string, i int) int {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	client := "198.51.100." + strconv.Itoa(i+1)
	r.Header.Set("X-Forwarded-For", client)
	r.Header.Set("X-Real-IP", client)
	if strings.HasPrefix(peer, "10.0.0.2:") {
		r.Header.Set("X-Forwarded-For", client+", 203.0.113.50")
		r.Header.Set("X-Real-IP", "203.0.113.50")
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w.Code
}

// TestKeys: what TestScenarios and TestForgedHeaders do not ask of Echo's
// key functions: ClientIP's keys via a proxy, made canonical as PeerIP's,
// and its refusal of an extractor that invents addresses; the RemoteAddr
// forms of net/http, a Unix socket's (400) and one rewritten from a header
// without a port (500); Adapt, ContextValue, and the misuses that fail
// every request.
func TestKeys(t *testing.T) {
	direct, proxied := extracting(echo.ExtractIPDirect()), extracting(echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...))
	inventing := extracting(func(*http.Request) string { return "unknown" })
	ip, err := ratekitecho.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		e         *echo.Echo // nil: echo.New()
		key       ratekitecho.Key
		peer, xff string // xff: X-Forwarded-For
		want      string
		err       error  // what the error wraps
		msg       string // what it says
	}{
		{"ClientIP via a proxy, IPv6", proxied, ratekitecho.ClientIP, "10.0.0.2:4711", "2001:db8:1:2::99", "2001:db8:1:2::/64", nil, ""},
		{"ClientIP via a proxy, IPv4-mapped", proxied, ratekitecho.ClientIP, "10.0.0.2:4711", "::ffff:198.51.100.4", "198.51.100.4", nil, ""},
		{"ClientIP, an extractor that invents", inventing, ratekitecho.ClientIP, "203.0.113.7:4711", "", "", keyfuncs.ErrMisconfigured, "e.IPExtractor"},
		{"ClientIP, a Unix socket", direct, ratekitecho.ClientIP, "@", "", "", keyfuncs.ErrMissing, ""},
		{"PeerIP, a Unix socket", nil, ratekitecho.PeerIP, "@", "", "", keyfuncs.ErrMissing, ""},
		{"ClientIP, RemoteAddr rewritten", direct, ratekitecho.ClientIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"PeerIP, RemoteAddr rewritten", direct, ratekitecho.PeerIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"IP, RemoteAddr rewritten", direct, ip, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"},
		{"Adapt", nil, ratekitecho.Adapt(keyfuncs.Query("api_key")), "203.0.113.7:1", "", "q-1", nil, ""},
		{"Adapt(nil)", nil, ratekitecho.Adapt(nil), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{`Header("")`, nil, ratekitecho.Header(""), "203.0.113.7:1", "", "", keyfuncs.ErrMisconfigured, ""},
		{"ContextValue of an int", nil, ratekitecho.ContextValue("n"), "203.0.113.7:1", "", "42", nil, ""},
		{"User (ContextValue) of a float", nil, ratekitecho.User("user"), "203.0.113.7:1", "", "", nil, `ratekitecho: c.Get("user") has unsupported type float64`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.e == nil {
				tc.e = echo.New()
			}
			r := httptest.NewRequest(http.MethodGet, "/?api_key=q-1", nil)
			r.RemoteAddr = tc.peer
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			c := tc.e.NewContext(r, httptest.NewRecorder())
			c.Set("n", 42)
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
