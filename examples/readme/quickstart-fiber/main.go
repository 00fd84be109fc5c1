package main

import (
	"log"
	"time"

	"github.com/gofiber/fiber/v2"

	ratekitfiber "github.com/ratekit/ratekit/fiber"
)

func main() {
	app := fiber.New()

	// Each client IP gets 100 requests a minute; past that, 429.
	app.Use(ratekitfiber.LimitByIP(100, time.Minute))

	app.Get("/", func(c *fiber.Ctx) error {
		return c.SendString("hello\n")
	})
	if err := app.Listen(":8080"); err != nil {
		log.Fatal(err)
	}
}
