package readme

// snippet: rules
import (
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rules"     // root module: the engine
	"github.com/ratekit/ratekit/rulesfile" // module github.com/ratekit/ratekit/rulesfile: YAML and fsnotify
	"github.com/ratekit/ratekit/stdhttp"
)

// end snippet

import (
	"net/http"

	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/redis/go-redis/v9"
)

// rulesServer limits mux by the rules of /etc/ratekit/rules.yaml, reloaded
// while serve runs with the handler. The rules' counters are in the Redis
// of rdb and their decisions go to metrics; userKey and planKey are the
// context keys under which the application's authentication stored the
// user ID and the user's plan.
func rulesServer(mux *http.ServeMux, rdb redis.UniversalClient, metrics *ratekitprom.Metrics,
	userKey, planKey any, serve func(http.Handler) error) error {
	// snippet: rules
	// Optional: counters in Redis, shared by every server (default: memory).
	store, err := redisstore.New(rdb)
	if err != nil {
		return err
	}
	// Your own descriptor key "plan": what your auth middleware stored.
	planOf := func(r rules.Request) (string, error) {
		plan, _ := r.Value(planKey).(string)
		return plan, nil // "": no plan, so descriptors keyed by plan do not match
	}

	engine, err := rules.NewEngine(
		// remote_address: the client's IP, taken from X-Forwarded-For only
		// when the peer is one of your load balancers (10.0.0.0/8 here).
		rules.WithClientIP(keyfuncs.TrustedProxies("10.0.0.0/8")),
		rules.WithUserKey(userKey), // user: where your auth middleware stored the user ID
		rules.WithKey("plan", planOf),
		rules.WithStore(store),
		rules.WithLimiterOptions(core.WithObserver(metrics.Observe)),
	)
	if err != nil {
		return err
	}
	if err := metrics.TrackRules(engine); err != nil { // series of rules a reload removes go too
		return err
	}
	w, err := rulesfile.Watch(engine, "/etc/ratekit/rules.yaml") // fails if the file is missing or invalid
	if err != nil {
		return err
	}
	defer w.Close()

	handler := stdhttp.Rules(engine, stdhttp.WithHeaders(answer.IETF))(mux) // or ratekitgin.Rules(engine), ratekitecho.Rules, ratekitfiber.Rules, ratekitchi.Rules
	// end snippet
	return serve(handler)
}
