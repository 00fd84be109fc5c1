package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	ratekitchi "github.com/ratekit/ratekit/chi"
)

func main() {
	r := chi.NewRouter()

	// Each client IP gets 100 requests a minute; past that, 429.
	r.Use(ratekitchi.LimitByIP(100, time.Minute))

	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	if err := http.ListenAndServe(":8080", r); err != nil {
		log.Fatal(err)
	}
}
