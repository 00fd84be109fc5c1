package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/stdhttp"
)

func main() {
	log.Fatal(run("rules.yaml", "127.0.0.1:8080"))
}

// run serves the API on addr behind the rules of the file at rulesPath.
func run(rulesPath, addr string) error {
	// The engine decides requests by the rules it holds. Without options,
	// remote_address is the TCP peer and the counters are in memory.
	engine, err := rules.NewEngine()
	if err != nil {
		return err
	}
	// Load the file into the engine, then reload it whenever it changes.
	// An invalid edit is logged, and the rules in force stay.
	watcher, err := rulesfile.Watch(engine, rulesPath)
	if err != nil {
		return err // the file is missing or invalid
	}
	defer watcher.Close()

	// Every request passes the rules before it reaches the mux.
	return http.ListenAndServe(addr, stdhttp.Rules(engine)(api()))
}

// api is the application: its routes know nothing of rate limits.
func api() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "logged in")
	})
	return mux
}
