package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/ratekit/ratekit/stdhttp"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})

	// Each client IP gets 100 requests a minute; past that, 429.
	handler := stdhttp.LimitByIP(100, time.Minute)(mux)

	if err := http.ListenAndServe(":8080", handler); err != nil {
		log.Fatal(err)
	}
}
