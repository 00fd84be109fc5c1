package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/keyfuncs"
	ratekitprom "github.com/ratekit/ratekit/prometheus" // module github.com/ratekit/ratekit/prometheus
	"github.com/ratekit/ratekit/stdhttp"
)

func main() {
	limit := core.Limit{Name: "api", Rate: core.PerMinute(100)} // the name is the series' limit label
	store := &core.MemoryStore{}
	m, err := ratekitprom.New(ratekitprom.WithMemoryStore(store, limit)) // adds ratekit_tracked_keys
	if err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(m)
	lim, err := core.NewLimiter(limit, core.WithStore(store),
		core.WithObserver(m.Observe), core.WithActionObserver(m.ObserveAction))
	if err != nil {
		log.Fatal(err)
	}

	api := http.NewServeMux()
	api.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler()) // not limited; in production, on an internal listener
	mux.Handle("/", stdhttp.New(lim, keyfuncs.PeerIP)(api))
	log.Fatal(http.ListenAndServe(":8080", mux))
}
