package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	ratekitecho5 "github.com/ratekit/ratekit/echo5"
)

func main() {
	e := echo.New()

	// Each client IP gets 100 requests a minute; past that, 429.
	e.Use(ratekitecho5.LimitByIP(100, time.Minute))

	e.GET("/", func(c *echo.Context) error {
		return c.String(http.StatusOK, "hello\n")
	})
	if err := e.Start(":8080"); err != nil {
		log.Fatal(err)
	}
}
