package readme

// snippet: rules
import (
	"github.com/ratekit/ratekit/rules"     // root module: the engine
	"github.com/ratekit/ratekit/rulesfile" // module github.com/ratekit/ratekit/rulesfile: YAML and fsnotify
)

// end snippet

import (
	"net/http"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/stdhttp"
)

// rulesServer limits mux by the rules of /etc/ratekit/rules.yaml, reloaded
// while serve runs with the handler. ip resolves remote_address, userKey is
// where the user ID is, planOf finds the "plan" key of a request.
func rulesServer(mux *http.ServeMux, ip *keyfuncs.ClientIP, userKey any, planOf rules.KeyFunc,
	redisStore core.Store, metrics *ratekitprom.Metrics, serve func(http.Handler) error) error {
	// snippet: rules
	engine, err := rules.NewEngine(
		rules.WithClientIP(ip),        // remote_address: the keyfuncs.ClientIP with your trusted proxies
		rules.WithUserKey(userKey),    // user: where your auth middleware stored the user ID
		rules.WithKey("plan", planOf), // your own descriptor keys
		rules.WithStore(redisStore),   // optional: counters shared by every server
		rules.WithLimiterOptions(core.WithObserver(metrics.Observe)),
	)
	if err != nil {
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
