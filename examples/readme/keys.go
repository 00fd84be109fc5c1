package readme

import (
	"context"
	"net/http"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/stdhttp"
)

// behindProxies limits mux by lim per client IP, trusting the proxies of
// 10.0.0.0/8 to name the client, and passes the handler to serve.
func behindProxies(lim *core.Limiter, mux *http.ServeMux, serve func(http.Handler) error) error {
	// snippet: proxies
	clientIP, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.IPv6Prefix(56))
	if err != nil {
		return err
	}
	handler := stdhttp.New(lim, clientIP)(mux)
	// end snippet
	return serve(handler)
}

// perTenant limits next by lim per tenant, as tenantFrom finds it in the
// request context.
func perTenant(lim *core.Limiter, next http.Handler, tenantFrom func(context.Context) string) http.Handler {
	// snippet: custom-key
	byTenant := func(r *http.Request) (string, error) {
		t := tenantFrom(r.Context())
		if t == "" {
			return "", keyfuncs.ErrMissing // 400 problem details, never a shared "" bucket
		}
		return t, nil
	}
	// end snippet
	return stdhttp.New(lim, byTenant)(next)
}
