// Command fiber is a minimal Fiber v2 server guarded by ratekit: 100
// requests a minute per client IP on every route (token bucket), and 5 a
// minute on POST /api/login (fixed window), counted apart.
//
//	go run ./fiber -addr :8080
//	curl -i -X POST http://localhost:8080/api/login
package main

import (
	"flag"
	"fmt"
	"log"
	"net"

	"github.com/gofiber/fiber/v2"

	"github.com/ratekit/ratekit/core"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

func main() {
	addr := flag.String("addr", ":8080", "`address` to listen on")
	flag.Parse()

	lim := core.Must(core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)}))
	login := core.Must(core.NewLimiter(core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}))

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(ratekitfiber.New(lim, ratekitfiber.PeerIP))
	app.Group("/api/login", ratekitfiber.New(login, ratekitfiber.PeerIP)).Post("/", func(c *fiber.Ctx) error {
		return c.SendString("welcome\n")
	})
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello\n") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())
	log.Fatal(app.Listener(ln))
}
