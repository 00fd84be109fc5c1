package keyfuncs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/ratekit/ratekit/keyfuncs"
)

// Behind a load balancer at 10.0.0.1, the client is the rightmost address in
// X-Forwarded-For that is not a trusted proxy. Requests that reach the
// server directly are keyed by their peer address, whatever headers they
// carry.
func ExampleIP() {
	key, err := keyfuncs.IP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}

	viaProxy := httptest.NewRequest(http.MethodGet, "/", nil)
	viaProxy.RemoteAddr = "10.0.0.1:41000"
	viaProxy.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7")

	direct := httptest.NewRequest(http.MethodGet, "/", nil)
	direct.RemoteAddr = "203.0.113.9:52000"
	direct.Header.Set("X-Forwarded-For", "1.1.1.1")

	ipv6 := httptest.NewRequest(http.MethodGet, "/", nil)
	ipv6.RemoteAddr = "[2001:db8:1:2::abcd]:443"

	for _, r := range []*http.Request{viaProxy, direct, ipv6} {
		fmt.Println(key(r))
	}
	// Output:
	// 198.51.100.7 <nil>
	// 203.0.113.9 <nil>
	// 2001:db8:1:2::/64 <nil>
}

func ExampleHeader() {
	apiKey := keyfuncs.Header("X-API-Key")

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "k-123")
	fmt.Println(apiKey(r))

	_, err := apiKey(httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(errors.Is(err, keyfuncs.ErrMissing))
	// Output:
	// k-123 <nil>
	// true
}

type userKey struct{}

// Authenticated requests are limited per user, anonymous requests per
// client IP address. The index prefix keeps the two kinds of key apart.
func ExampleFirst() {
	ip, err := keyfuncs.IP()
	if err != nil {
		log.Fatal(err)
	}
	key := keyfuncs.First(keyfuncs.User(userKey{}), ip)

	anonymous := httptest.NewRequest(http.MethodGet, "/", nil)
	anonymous.RemoteAddr = "192.0.2.1:1234"
	authenticated := anonymous.WithContext(context.WithValue(anonymous.Context(), userKey{}, "alice"))

	fmt.Println(key(authenticated))
	fmt.Println(key(anonymous))
	// Output:
	// 0:alice <nil>
	// 1:192.0.2.1 <nil>
}

// A limit per route and client IP address.
func ExampleJoin() {
	ip, err := keyfuncs.IP()
	if err != nil {
		log.Fatal(err)
	}
	key := keyfuncs.Join(keyfuncs.Route(), ip)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(key(r))
	})
	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	mux.ServeHTTP(httptest.NewRecorder(), r)
	// Output:
	// 15:GET /items/{id}|9:192.0.2.1 <nil>
}
