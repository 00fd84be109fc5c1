// Command chi is a minimal Chi v5 server guarded by ratekit: 100 requests
// a minute per client IP on every route (token bucket), and 5 a minute on
// POST /api/login (fixed window), counted apart.
//
//	go run ./chi -addr 127.0.0.1:8080
//	curl -i -X POST http://127.0.0.1:8080/api/login
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	ratekitchi "github.com/ratekit/ratekit/chi"
	"github.com/ratekit/ratekit/core"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()

	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))

	r := chi.NewRouter()
	r.Use(ratekitchi.New(lim, ratekitchi.PeerIP))
	r.Route("/api/login", func(r chi.Router) {
		r.Use(ratekitchi.New(login, ratekitchi.PeerIP))
		r.Post("/", reply("welcome\n"))
	})
	r.Get("/api/items", reply("items\n"))
	r.Get("/", reply("hello\n"))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

func reply(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }
}
