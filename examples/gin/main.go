// Command gin is a minimal Gin server guarded by ratekit: 100 requests a
// minute per client IP on every route (token bucket), and 5 a minute on
// POST /api/login (fixed window), counted apart.
//
//	go run ./gin -addr 127.0.0.1:8080
//	curl -i -X POST http://127.0.0.1:8080/api/login
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	ratekitgin "github.com/ratekit/ratekit/gin"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()

	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies(nil); err != nil { // Gin trusts every proxy unless told otherwise
		log.Fatal(err)
	}
	r.Use(ratekitgin.New(lim, ratekitgin.PeerIP))
	r.Group("/api/login", ratekitgin.New(login, ratekitgin.PeerIP)).POST("", func(c *gin.Context) {
		c.String(http.StatusOK, "welcome\n")
	})
	r.GET("/api/items", func(c *gin.Context) { c.String(http.StatusOK, "items\n") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())
	log.Fatal(http.Serve(ln, r))
}
