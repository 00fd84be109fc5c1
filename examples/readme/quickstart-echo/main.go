package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	ratekitecho "github.com/ratekit/ratekit/echo"
)

func main() {
	e := echo.New()

	// Each client IP gets 100 requests a minute; past that, 429.
	e.Use(ratekitecho.LimitByIP(100, time.Minute))

	e.GET("/", func(c echo.Context) error {
		return c.String(http.StatusOK, "hello\n")
	})
	if err := e.Start(":8080"); err != nil {
		log.Fatal(err)
	}
}
