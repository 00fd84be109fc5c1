package readme

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	fiber3 "github.com/gofiber/fiber/v3"
	"github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratekitchi "github.com/ratekit/ratekit/chi"
	ratekitconnect "github.com/ratekit/ratekit/connect"
	ratekitecho "github.com/ratekit/ratekit/echo"
	ratekitecho5 "github.com/ratekit/ratekit/echo5"
	ratekitfiber "github.com/ratekit/ratekit/fiber"
	ratekitfiber3 "github.com/ratekit/ratekit/fiber3"
	ratekitgin "github.com/ratekit/ratekit/gin"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
	"github.com/ratekit/ratekit/stdhttp"
)

// The one-line quick starts: each framework's server with GET / behind
// LimitByIP(100, time.Minute), the README's first snippet.

const hello = "hello\n"

func onelineStdhttp() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, hello) })
	// snippet: oneline
	handler := stdhttp.LimitByIP(100, time.Minute)(mux) // net/http: 100 requests a minute per client IP
	// end snippet
	return handler
}

func onelineGin() *gin.Engine {
	r := gin.New()
	// snippet: oneline
	r.Use(ratekitgin.LimitByIP(100, time.Minute)) // Gin
	// end snippet
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, hello) })
	return r
}

func onelineEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// snippet: oneline
	e.Use(ratekitecho.LimitByIP(100, time.Minute)) // Echo v4
	// end snippet
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, hello) })
	return e
}

func onelineEcho5() *echo5.Echo {
	e := echo5.New()
	// snippet: oneline
	e.Use(ratekitecho5.LimitByIP(100, time.Minute)) // Echo v5
	// end snippet
	e.GET("/", func(c *echo5.Context) error { return c.String(http.StatusOK, hello) })
	return e
}

func onelineFiber() *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	// snippet: oneline
	app.Use(ratekitfiber.LimitByIP(100, time.Minute)) // Fiber v2
	// end snippet
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString(hello) })
	return app
}

func onelineFiber3() *fiber3.App {
	app := fiber3.New()
	// snippet: oneline
	app.Use(ratekitfiber3.LimitByIP(100, time.Minute)) // Fiber v3
	// end snippet
	app.Get("/", func(c fiber3.Ctx) error { return c.SendString(hello) })
	return app
}

func onelineChi() chi.Router {
	r := chi.NewRouter()
	// snippet: oneline
	r.Use(ratekitchi.LimitByIP(100, time.Minute)) // Chi
	// end snippet
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, hello) })
	return r
}

// The one-line quick starts of the RPC stacks: a grpc-go server with the
// health service, a Connect handler of one procedure.

func onelineGRPC() *grpc.Server {
	// snippet: oneline
	srv := grpc.NewServer(ratekitgrpc.LimitByIP(100, time.Minute)...) // grpc-go: 100 calls a minute per client IP
	// end snippet
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv
}

const greetProcedure = "/greet.v1.GreetService/Greet"

func greet(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
}

func onelineConnect() http.Handler {
	mux := http.NewServeMux()
	procedure := greetProcedure
	// snippet: oneline
	h := connect.NewUnaryHandler(procedure, greet, ratekitconnect.LimitByIP(100, time.Minute)) // Connect
	// end snippet
	mux.Handle(procedure, h)
	return mux
}
