package ratekitecho_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	"github.com/ratekit/ratekit/internal/echoport/echotest"
	"github.com/ratekit/ratekit/keyfuncs"
)

// extracting returns an Echo instance with the client-address extractor x.
func extracting(x echo.IPExtractor) *echo.Echo {
	e := echo.New()
	e.IPExtractor = x
	return e
}

// only returns Echo's trust options that trust the proxies of cidr and no
// others, its default trust of private ranges turned off.
func only(cidr string) []echo.TrustOption {
	return []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false), echo.TrustIPRange(echotest.IPNet(cidr))}
}

// TestForgedHeaders: a client that forges X-Forwarded-For and X-Real-IP
// gets no more requests under a safe setting of e.IPExtractor, and
// ClientIP refuses those that believe it, Echo's default (no extractor)
// among them, with an error when the key is built (see
// echotest.RunForged).
func TestForgedHeaders(t *testing.T) {
	serving := func(x echo.IPExtractor, key echotest.KeyOf[echo.Context, *echo.Echo], lim *core.Limiter, log *slog.Logger) (http.Handler, error) {
		e := extracting(x)
		cfg := ratekitecho.Config{Limiter: lim, Logger: log}
		if key != nil {
			k, err := key(e)
			if err != nil {
				return nil, err
			}
			cfg.Key = k
		}
		e.Use(ratekitecho.NewWithConfig(cfg))
		e.GET("/", ok)
		return e, nil
	}
	clientIP := func(e *echo.Echo) (func(echo.Context) (string, error), error) { return ratekitecho.ClientIP(e) }
	forged := echotest.NewForged[echo.Context, *echo.Echo, echo.IPExtractor]
	echotest.RunForged(t, api, ratekitecho.ClientIP, echo.ExtractIPFromXFFHeader(echo.TrustIPRange(echotest.IPNet("0.0.0.0/0"))), serving,
		forged("ClientIP, ExtractIPDirect", echo.ExtractIPDirect(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, ExtractIPDirect, IPv6", echo.ExtractIPDirect(), clientIP, "[2001:db8:1:2::7]:4711"),
		forged("ClientIP, own proxies", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, own proxies, via proxy", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "10.0.0.2:4711"),
		forged("ClientIP, XFF with Echo's default trust", echo.ExtractIPFromXFFHeader(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, Echo's default", nil, clientIP, "203.0.113.7:4711", "e.IPExtractor is nil", "echo.ExtractIPDirect()", "TrustIPRange"),
		forged("ClientIP, X-Real-IP trusting every IPv6 peer", echo.ExtractIPFromRealIPHeader(echo.TrustIPRange(echotest.IPNet("::/0"))), clientIP,
			"203.0.113.7:4711", "e.IPExtractor", "X-Real-Ip", "2001:db8::1"),
	)
	_, err := ratekitecho.ClientIP(nil)
	assert.ErrorIs(t, err, keyfuncs.ErrMisconfigured)
}

// TestClientIPAfterLateChanges: e.IPExtractor replaced after ClientIP
// checked it, on a real server (see echotest.RunLate): an extractor that
// trusts every peer, Echo's default (none) and one that invents an
// address are not honoured, the TCP peer keeps the limit and one line
// says so; a safe one set afterwards is followed.
func TestClientIPAfterLateChanges(t *testing.T) {
	serve := func(t *testing.T, lim *core.Limiter) (http.Handler, func(echo.IPExtractor)) {
		e := extracting(echo.ExtractIPDirect())
		key, err := ratekitecho.ClientIP(e)
		require.NoError(t, err)
		e.Use(ratekitecho.New(lim, key))
		e.GET("/", ok)
		return e, func(x echo.IPExtractor) { e.IPExtractor = x }
	}
	echotest.RunLate(t, serve, echo.ExtractIPFromXFFHeader(only("127.0.0.1/32")...),
		echotest.Late[echo.IPExtractor]{Name: "XFF trusting every peer", Extract: echo.ExtractIPFromXFFHeader(echo.TrustIPRange(echotest.IPNet("0.0.0.0/0")))},
		echotest.Late[echo.IPExtractor]{Name: "Echo's default, none", Extract: nil},
		echotest.Late[echo.IPExtractor]{Name: "X-Real-IP from anyone", Extract: func(r *http.Request) string { return r.Header.Get("X-Real-IP") }},
	)
}

// TestKeys: what TestScenarios and TestForgedHeaders do not ask of Echo's
// key functions: ClientIP's keys via a proxy, made canonical as PeerIP's,
// its refusal of a Unix socket's RemoteAddr (400) and of one rewritten
// without a port (500); that it allocates no more than its extractor; and
// the checks of echotest.RunKeys.
func TestKeys(t *testing.T) {
	direct, proxied := extracting(echo.ExtractIPDirect()), extracting(echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...))
	newContext := func(e *echo.Echo, r *http.Request) echo.Context {
		if e == nil {
			e = echo.New()
		}
		return e.NewContext(r, httptest.NewRecorder())
	}
	clientIP := func(e *echo.Echo) ratekitecho.Key {
		k, err := ratekitecho.ClientIP(e)
		require.NoError(t, err)
		return k
	}
	keyed := echotest.NewKeyCase[echo.Context, *echo.Echo]
	echotest.RunKeys(t, api, newContext,
		keyed("ClientIP via a proxy, IPv6", proxied, clientIP(proxied), "10.0.0.2:4711", "2001:db8:1:2::99", "2001:db8:1:2::/64", nil, ""),
		keyed("ClientIP via a proxy, IPv4-mapped", proxied, clientIP(proxied), "10.0.0.2:4711", "::ffff:198.51.100.4", "198.51.100.4", nil, ""),
		keyed("ClientIP, a Unix socket", direct, clientIP(direct), "@", "", "", keyfuncs.ErrMissing, ""),
		keyed("ClientIP, RemoteAddr rewritten", direct, clientIP(direct), "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"),
	)

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	c, key := newContext(direct, r), clientIP(direct)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = key(c) }), "ExtractIPDirect allocates nothing, nor does the key")
}
