package ratekitecho_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

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
// ClientIP refuses (500, logged) those that believe it, each Echo instance
// on its own (see echotest.RunForged).
func TestForgedHeaders(t *testing.T) {
	serving := func(x echo.IPExtractor, key func(echo.Context) (string, error), lim *core.Limiter, log *slog.Logger) http.Handler {
		e := extracting(x)
		e.Use(ratekitecho.NewWithConfig(ratekitecho.Config{Limiter: lim, Key: key, Logger: log}))
		e.GET("/", ok)
		return e
	}
	forged, clientIP := echotest.NewForged[echo.Context, echo.IPExtractor], ratekitecho.ClientIP
	echotest.RunForged(t, api, echo.ExtractIPDirect(), echo.ExtractIPFromXFFHeader(echo.TrustIPRange(echotest.IPNet("0.0.0.0/0"))), serving,
		forged("ClientIP, ExtractIPDirect", echo.ExtractIPDirect(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, ExtractIPDirect, IPv6", echo.ExtractIPDirect(), clientIP, "[2001:db8:1:2::7]:4711"),
		forged("ClientIP, own proxies", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, own proxies, via proxy", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "10.0.0.2:4711"),
		forged("ClientIP, XFF with Echo's default trust", echo.ExtractIPFromXFFHeader(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, Echo's default", nil, clientIP, "203.0.113.7:4711", "e.IPExtractor is nil", "echo.ExtractIPDirect()", "TrustIPRange"),
		forged("ClientIP, X-Real-IP trusting every IPv6 peer", echo.ExtractIPFromRealIPHeader(echo.TrustIPRange(echotest.IPNet("::/0"))), clientIP,
			"203.0.113.7:4711", "e.IPExtractor", "X-Real-Ip", "2001:db8::1"),
	)
}

// TestKeys: what TestScenarios and TestForgedHeaders do not ask of Echo's
// key functions: ClientIP's keys via a proxy, made canonical as PeerIP's,
// its refusal of an extractor that invents addresses, of a Unix socket's
// RemoteAddr (400) and of one rewritten without a port (500); and the
// checks of echotest.RunKeys.
func TestKeys(t *testing.T) {
	direct, proxied := extracting(echo.ExtractIPDirect()), extracting(echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...))
	inventing := extracting(func(*http.Request) string { return "unknown" })
	newContext := func(e *echo.Echo, r *http.Request) echo.Context {
		if e == nil {
			e = echo.New()
		}
		return e.NewContext(r, httptest.NewRecorder())
	}
	keyed, clientIP := echotest.NewKeyCase[echo.Context, *echo.Echo], ratekitecho.ClientIP
	echotest.RunKeys(t, api, newContext,
		keyed("ClientIP via a proxy, IPv6", proxied, clientIP, "10.0.0.2:4711", "2001:db8:1:2::99", "2001:db8:1:2::/64", nil, ""),
		keyed("ClientIP via a proxy, IPv4-mapped", proxied, clientIP, "10.0.0.2:4711", "::ffff:198.51.100.4", "198.51.100.4", nil, ""),
		keyed("ClientIP, an extractor that invents", inventing, clientIP, "203.0.113.7:4711", "", "", keyfuncs.ErrMisconfigured, "e.IPExtractor"),
		keyed("ClientIP, a Unix socket", direct, clientIP, "@", "", "", keyfuncs.ErrMissing, ""),
		keyed("ClientIP, RemoteAddr rewritten", direct, clientIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"),
	)
}
