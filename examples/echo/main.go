// Command echo is a minimal Echo v4 server guarded by ratekit: 100
// requests a minute per client IP on every route (token bucket), and 5 a
// minute on POST /api/login (fixed window), counted apart.
//
//	go run ./echo -addr 127.0.0.1:8080
//	curl -i -X POST http://127.0.0.1:8080/api/login
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	ratekitecho "github.com/ratekit/ratekit/echo"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()

	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))

	e := echo.New()
	e.Use(ratekitecho.New(lim, ratekitecho.PeerIP))
	e.Group("/api/login", ratekitecho.New(login, ratekitecho.PeerIP)).POST("", func(c echo.Context) error {
		return c.String(http.StatusOK, "welcome\n")
	})
	e.GET("/api/items", func(c echo.Context) error { return c.String(http.StatusOK, "items\n") })
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())

	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
