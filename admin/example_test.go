package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ratekit/ratekit/admin"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func Example() {
	// A fixed clock makes the example exact; servers use the system clock.
	clock := storetest.NewClock(storetest.Epoch)
	api := core.Must(core.NewLimiter(
		core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(3)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(quiet),
	))
	ops, err := admin.New(map[string]*core.Limiter{"api": api})
	if err != nil {
		panic(err)
	}
	// An application mounts ops behind its own authentication:
	// mux.Handle("/admin/ratekit/", requireOperator(ops)).
	call := func(method, target, body string) {
		r := httptest.NewRequest(method, "/admin/ratekit/"+target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		ops.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	take := func(n int) {
		var got []string
		for range n {
			d, _ := api.Take(context.Background(), "203.0.113.7", 1)
			got = append(got, fmt.Sprint(d.Allowed))
		}
		fmt.Println("take:", strings.Join(got, " "))
	}

	take(4)
	call(http.MethodGet, "state?limiter=api&key=203.0.113.7", "")
	call(http.MethodPost, "reset", `{"limiter":"api","key":"203.0.113.7","reason":"ticket 4711"}`)
	call(http.MethodPost, "reset", `{"limiter":"api","key":"198.51.100.1"}`)
	take(4)
	call(http.MethodPost, "grant", `{"limiter":"api","key":"203.0.113.7","amount":2,"reason":"ticket 4712"}`)
	take(3)

	// Output:
	// take: true true true false
	// 200 {"limiter":"api","key_hash":"fec52565aa0cf18f","tracked":true,"decision":{"name":"api","allowed":false,"remaining":0,"quota":3,"window":60,"reset_after":60,"retry_after":60},"limits":[{"name":"api","allowed":false,"remaining":0,"quota":3,"window":60,"reset_after":60,"retry_after":60,"granted":false,"grant":{"amount":0,"expires_in":0}}]}
	// 200 {"limiter":"api","key_hash":"fec52565aa0cf18f","found":true}
	// 200 {"limiter":"api","key_hash":"7f60d869b36f6e64","found":false}
	// take: true true true false
	// 200 {"limiter":"api","key_hash":"fec52565aa0cf18f","amount":2,"state":{"limiter":"api","key_hash":"fec52565aa0cf18f","tracked":true,"decision":{"name":"api","allowed":true,"remaining":1,"quota":3,"window":60,"reset_after":60,"retry_after":0},"limits":[{"name":"api","allowed":true,"remaining":1,"quota":3,"window":60,"reset_after":60,"retry_after":0,"granted":true,"grant":{"amount":2,"expires_in":60}}]}}
	// take: true true false
}
