package readme

import (
	"context"
	"crypto/subtle"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

// The plans and operator sections: a Gin server whose limit is each
// user's plan, and the admin handler on an internal mux.

// accounts is the README's plan lookup: the users who pay.
type accounts map[string]bool

func (a accounts) IsPaid(_ context.Context, user string) bool { return a[user] }

// plansServer serves GET /api/items with the plans limiter, for the users
// that the header X-User names (the application's authentication, in
// the README, stores the user with c.Set("user", id)).
func plansServer(accounts accounts) (*gin.Engine, *core.Limiter) {
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
	})
	// snippet: plans
	free := core.Limit{Name: "api", Rate: core.PerMinute(100)}
	paid := core.Limit{Name: "api", Rate: core.PerMinute(1000)}
	lim := core.Must(core.NewPlanLimiter(func(ctx context.Context, user string) (core.Limit, error) {
		if accounts.IsPaid(ctx, user) {
			return paid, nil
		}
		return free, nil
	}))
	r.Use(ratekitgin.New(lim, ratekitgin.User("user")))
	// end snippet
	r.GET("/api/items", func(c *gin.Context) { c.String(http.StatusOK, "items\n") })
	return r, lim
}

// adminMux mounts the admin handler over api and login behind a bearer
// token, as the README's requireOperator does.
func adminMux(api, login *core.Limiter, token string) (*http.ServeMux, error) {
	requireOperator := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	internal := http.NewServeMux()
	// snippet: admin
	ops, err := admin.New(map[string]*core.Limiter{"api": api, "login": login})
	if err != nil {
		return nil, err
	}
	internal.Handle("/admin/ratekit/", requireOperator(ops)) // your own authentication
	// end snippet
	return internal, nil
}
