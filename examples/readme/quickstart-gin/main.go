package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	ratekitgin "github.com/ratekit/ratekit/gin"
)

func main() {
	r := gin.New()

	// Each client IP gets 100 requests a minute; past that, 429.
	r.Use(ratekitgin.LimitByIP(100, time.Minute))

	r.GET("/", func(c *gin.Context) {
		c.String(http.StatusOK, "hello\n")
	})
	if err := r.Run(":8080"); err != nil {
		log.Fatal(err)
	}
}
