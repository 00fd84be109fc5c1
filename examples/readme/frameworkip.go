package readme

import (
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitgin "github.com/ratekit/ratekit/gin"
	"github.com/ratekit/ratekit/keyfuncs"
)

// The frameworks' own client addresses, configured safely behind the
// proxies of 10.0.0.0/8: each server limits GET / by lim per client.

// ginClientIP is Gin keyed by c.ClientIP().
func ginClientIP(lim *core.Limiter) (*gin.Engine, error) {
	// snippet: gin-client-ip
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil { // your proxies; nil for none
		return nil, err
	}
	clientIP, err := ratekitgin.ClientIP(r) // an error before SetTrustedProxies, or with TrustedPlatform
	if err != nil {
		return nil, err
	}
	r.Use(ratekitgin.New(lim, clientIP))
	// end snippet
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	return r, nil
}

// echoClientIP is Echo keyed by c.RealIP().
func echoClientIP(lim *core.Limiter) (*echo.Echo, error) {
	// snippet: echo-client-ip
	_, proxies, err := net.ParseCIDR("10.0.0.0/8")
	if err != nil {
		return nil, err
	}
	e := echo.New() // without proxies: e.IPExtractor = echo.ExtractIPDirect()
	e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustLoopback(false), echo.TrustLinkLocal(false),
		echo.TrustPrivateNet(false), echo.TrustIPRange(proxies))
	clientIP, err := ratekitecho.ClientIP(e) // an error while e.IPExtractor is nil or trusts anyone
	if err != nil {
		return nil, err
	}
	e.Use(ratekitecho.New(lim, clientIP))
	// end snippet
	e.HideBanner, e.HidePort = true, true
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	return e, nil
}

// fiberClientIP is Fiber keyed by c.IP().
func fiberClientIP(lim *core.Limiter) (*fiber.App, error) {
	// snippet: fiber-ip
	app := fiber.New(fiber.Config{
		ProxyHeader:             "X-Real-IP", // one your proxy overwrites; never X-Forwarded-For
		EnableTrustedProxyCheck: true,
		TrustedProxies:          []string{"10.0.0.0/8"},
		EnableIPValidation:      true,
	})
	clientIP, err := ratekitfiber.ClientIP(app) // an error for ProxyHeader without the trusted-proxy check
	if err != nil {
		return nil, err
	}
	app.Use(ratekitfiber.New(lim, clientIP))
	// end snippet
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello\n") })
	return app, nil
}

// chiTrustedIP is Chi keyed by the client behind the proxies.
func chiTrustedIP(lim *core.Limiter) (chi.Router, error) {
	// snippet: chi-trusted-ip
	clientIP, err := ratekitchi.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	// No r.Use(middleware.RealIP) before this line: every client-IP key
	// answers 500 after it.
	r.Use(ratekitchi.New(lim, clientIP))
	// end snippet
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello\n")) })
	return r, nil
}
