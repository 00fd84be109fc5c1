package readme

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// A ctxKey is a context key of the test's made-up authentication.
type ctxKey string

// TestRulesSnippet builds the rules engine of docs/rules.md with every
// option it shows, on a private Redis. The guide's rules file is
// /etc/ratekit/rules.yaml, which a test machine does not have: the watcher
// must refuse to start without it (after every option was accepted).
func TestRulesSnippet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	metrics, err := ratekitprom.New()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello\n") })

	const path = "/etc/ratekit/rules.yaml"
	served := false
	err = rulesServer(mux, srv.Client(t), metrics, ctxKey("user"), ctxKey("plan"), func(h http.Handler) error {
		served = true
		c := serveHTTP(t, h)
		if r := c.send("GET", "/"); r.status >= 500 {
			t.Errorf("GET / through the rules of %s: status %d", path, r.status)
		}
		return nil
	})
	if _, statErr := os.Stat(path); statErr == nil {
		if err != nil || !served {
			t.Errorf("rulesServer with %s present: %v (served: %t)", path, err, served)
		}
		return
	}
	if err == nil || served || !strings.Contains(err.Error(), path) {
		t.Errorf("rulesServer without %s: error %v (served: %t), want an error naming the file", path, err, served)
	}
}
