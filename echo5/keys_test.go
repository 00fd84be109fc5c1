package ratekitecho5_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/ratekit/ratekit/core"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
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
// gets no more requests under Echo v5's default (the TCP peer) or a safe
// e.IPExtractor, and ClientIP refuses (500, logged) those that believe it,
// echo.LegacyIPExtractor() among them, each Echo instance on its own (see
// echotest.RunForged).
func TestForgedHeaders(t *testing.T) {
	serving := func(x echo.IPExtractor, key func(*echo.Context) (string, error), lim *core.Limiter, log *slog.Logger) http.Handler {
		e := extracting(x)
		e.Use(ratekitecho5.NewWithConfig(ratekitecho5.Config{Limiter: lim, Key: key, Logger: log}))
		e.GET("/", ok)
		return e
	}
	forged, clientIP := echotest.NewForged[*echo.Context, echo.IPExtractor], ratekitecho5.ClientIP
	echotest.RunForged(t, api, echo.ExtractIPDirect(), echo.ExtractIPFromXFFHeader(echo.TrustIPRange(echotest.IPNet("0.0.0.0/0"))), serving,
		forged("ClientIP, Echo's default", nil, clientIP, "203.0.113.7:4711"),
		forged("ClientIP, Echo's default, IPv6", nil, clientIP, "[2001:db8:1:2::7]:4711"),
		forged("ClientIP, ExtractIPDirect", echo.ExtractIPDirect(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, own proxies", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, own proxies, via proxy", echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...), clientIP, "10.0.0.2:4711"),
		forged("ClientIP, X-Real-IP from own proxy, via proxy", echo.ExtractIPFromRealIPHeader(only("10.0.0.2/32")...), clientIP, "10.0.0.2:4711"),
		forged("ClientIP, XFF with Echo's default trust", echo.ExtractIPFromXFFHeader(), clientIP, "203.0.113.7:4711"),
		forged("ClientIP, XFF with Echo's default trust, via proxy", echo.ExtractIPFromXFFHeader(), clientIP, "10.0.0.2:4711"),
		forged("ClientIP, LegacyIPExtractor", echo.LegacyIPExtractor(), clientIP, "203.0.113.7:4711",
			"e.IPExtractor", "X-Forwarded-For", "192.0.2.1", "echo.ExtractIPDirect()", "never echo.LegacyIPExtractor()"),
		forged("ClientIP, X-Real-IP trusting every IPv6 peer", echo.ExtractIPFromRealIPHeader(echo.TrustIPRange(echotest.IPNet("::/0"))), clientIP,
			"203.0.113.7:4711", "e.IPExtractor", "X-Real-Ip", "2001:db8::1"),
	)
}

// TestKeys: what TestScenarios and TestForgedHeaders do not ask of Echo's
// key functions: ClientIP's keys via a proxy, made canonical as PeerIP's,
// on a context without an Echo instance, and behind Echo's default trust,
// which believes any private peer (the limit of the probe, whose peers are
// public, that ClientIP's documentation states); its refusal of an
// extractor that invents addresses, of a Unix socket's RemoteAddr (400)
// and of one rewritten without a port (500); and the checks of
// echotest.RunKeys.
func TestKeys(t *testing.T) {
	direct, proxied, lax := extracting(echo.ExtractIPDirect()), extracting(echo.ExtractIPFromXFFHeader(only("10.0.0.0/8")...)), extracting(echo.ExtractIPFromXFFHeader())
	inventing := extracting(func(*http.Request) string { return "unknown" })
	newContext := func(e *echo.Echo, r *http.Request) *echo.Context {
		if e == nil {
			return echo.NewContext(r, httptest.NewRecorder()) // a context without an Echo instance
		}
		return e.NewContext(r, httptest.NewRecorder())
	}
	keyed, clientIP := echotest.NewKeyCase[*echo.Context, *echo.Echo], ratekitecho5.ClientIP
	echotest.RunKeys(t, api, newContext,
		keyed("ClientIP without an Echo instance", nil, clientIP, "203.0.113.7:4711", "1.1.1.1", "203.0.113.7", nil, ""),
		keyed("ClientIP, Echo's default trust, a private peer", lax, clientIP, "192.168.1.9:4711", "1.1.1.1", "1.1.1.1", nil, ""),
		keyed("ClientIP via a proxy, IPv6", proxied, clientIP, "10.0.0.2:4711", "2001:db8:1:2::99", "2001:db8:1:2::/64", nil, ""),
		keyed("ClientIP via a proxy, IPv4-mapped", proxied, clientIP, "10.0.0.2:4711", "::ffff:198.51.100.4", "198.51.100.4", nil, ""),
		keyed("ClientIP, an extractor that invents", inventing, clientIP, "203.0.113.7:4711", "", "", keyfuncs.ErrMisconfigured, "e.IPExtractor"),
		keyed("ClientIP, a Unix socket", nil, clientIP, "@", "", "", keyfuncs.ErrMissing, ""),
		keyed("ClientIP, RemoteAddr rewritten", nil, clientIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"),
		keyed("ClientIP, RemoteAddr rewritten, direct", direct, clientIP, "198.51.100.7", "", "", keyfuncs.ErrMisconfigured, "without a port"),
	)
}
