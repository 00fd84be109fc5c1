package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/stdhttp"
)

// redisLog takes go-redis's own log lines, one per failed dial, which
// repeat several times a second while Redis is away, and writes them to
// slog at debug level. ratekit logs the outage itself: one line when it
// starts, one with the count of failed decisions when Redis answers again.
type redisLog struct{ log *slog.Logger }

// Printf is go-redis's logging interface.
func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)) // level info: go-redis's lines are dropped
	redis.SetLogger(redisLog{logger})                       // before the first client

	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "localhost:6379"
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // the store's timeout bounds each call, and calls share round trips
	})
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapi"))
	if err != nil {
		log.Fatal(err)
	}
	// Servers share the counters of limits with the same name, algorithm
	// and period: name every limit.
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)},
		core.WithStore(store), core.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe(":8080", stdhttp.New(lim, keyfuncs.PeerIP, stdhttp.WithLogger(logger))(mux)))
}
