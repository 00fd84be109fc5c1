package rulesfile_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/stdhttp"
)

// server serves ok behind stdhttp.Rules on an engine loaded from yaml,
// with a clocked memory store; descriptor keys named in headerKeys read
// the header of the same name.
type server struct {
	t     *testing.T
	h     http.Handler
	clock *storetest.Clock
}

func newServer(t *testing.T, yaml string, headerKeys ...string) *server {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	opts := []rules.Option{rules.WithStore(&core.MemoryStore{Clock: clock.Now})}
	for _, k := range headerKeys {
		name := k
		opts = append(opts, rules.WithKey(k, func(r rules.Request) (string, error) {
			if v := r.Values(name); len(v) > 0 {
				return v[0], nil
			}
			return "", nil
		}))
	}
	e, err := rules.NewEngine(opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rulesfile.Parse("example.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(cfg); err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	return &server{t: t, h: stdhttp.Rules(e)(ok), clock: clock}
}

// passes sends n requests "METHOD /path" from ip with the headers
// "Name: value" and returns how many were not rejected.
func (s *server) passes(n int, line, ip string, headers ...string) int {
	s.t.Helper()
	method, target, _ := strings.Cut(line, " ")
	ok := 0
	for range n {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = ip + ":4000"
		for _, h := range headers {
			k, v, _ := strings.Cut(h, ": ")
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			s.t.Fatalf("%s: status %d", line, w.Code)
		}
	}
	return ok
}

func expect(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d passed, want %d", what, got, want)
	}
}

// The login example: 5 login attempts per minute per client IP.
func TestBehaveLogin(t *testing.T) {
	s := newServer(t, `domain: auth
descriptors:
  - key: remote_address
    match:
      method: POST
      path: /login
    rate_limit:
      unit: minute
      requests_per_unit: 5
`)
	expect(t, "POST /login", s.passes(8, "POST /login", "192.0.2.1"), 5)
	expect(t, "another client", s.passes(8, "POST /login", "192.0.2.2"), 5)
	expect(t, "GET /login", s.passes(8, "GET /login", "192.0.2.1"), 8)
	s.clock.Advance(time.Minute)
	expect(t, "next minute", s.passes(8, "POST /login", "192.0.2.1"), 5)
}

// Envoy's per-IP example: 10 per second for each address, and one
// address blocked with requests_per_unit 0.
func TestBehaveEdgeProxyPerIP(t *testing.T) {
	s := newServer(t, `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)
	expect(t, "any address", s.passes(15, "GET /", "192.0.2.1"), 10)
	expect(t, "the blocked address", s.passes(3, "GET /", "50.0.0.5"), 0)
	s.clock.Advance(time.Second)
	expect(t, "next second", s.passes(15, "GET /", "192.0.2.1"), 10)
	expect(t, "still blocked", s.passes(3, "GET /", "50.0.0.5"), 0)
}

// Envoy's messaging example: 5 marketing messages a day per number, and
// 100 messages a day per number of any type.
func TestBehaveMessaging(t *testing.T) {
	s := newServer(t, `domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`, "message_type", "to_number")
	expect(t, "marketing to 555", s.passes(10, "POST /", "192.0.2.1", "message_type: marketing", "to_number: 555"), 5)
	expect(t, "marketing to 556", s.passes(10, "POST /", "192.0.2.1", "message_type: marketing", "to_number: 556"), 5)
	expect(t, "other messages to 555", s.passes(200, "POST /", "192.0.2.1", "message_type: alert", "to_number: 555"), 95)
}

// Envoy's shadow-mode example: the nested limit counts but never rejects.
func TestBehaveShadowMode(t *testing.T) {
	s := newServer(t, `domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        value: subvalue
        rate_limit:
          requests_per_unit: 3
          unit: second
        shadow_mode: true
`, "key", "subkey")
	expect(t, "shadow", s.passes(10, "GET /", "192.0.2.1", "key: value", "subkey: subvalue"), 10)
}

// replaces: a named limit is suppressed where the replacing one applies.
func TestBehaveReplaces(t *testing.T) {
	s := newServer(t, `domain: example
descriptors:
  - key: key
    value: value
    rate_limit:
      name: general
      unit: minute
      requests_per_unit: 2
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 6
      replaces:
        - name: general
`, "key", "key2")
	expect(t, "general", s.passes(10, "GET /", "192.0.2.1", "key: value"), 2)
	expect(t, "replaced", s.passes(10, "GET /", "192.0.2.1", "key: value", "key2: value2"), 6)
}

// Nesting, as Envoy: the limit of the descriptor where the request's
// descriptor ends applies, not its parents'; cascade: true (a ratekit
// extension) applies every limit on the way down.
func TestBehaveNesting(t *testing.T) {
	const cfg = `domain: nest
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: minute, requests_per_unit: 5}
`
	s := newServer(t, cfg, "tenant", "plan")
	expect(t, "tenant a, free plan: the child's limit alone", s.passes(10, "GET /", "192.0.2.1", "tenant: a", "plan: free"), 5)
	expect(t, "tenant a, another plan: the descriptor ends at tenant", s.passes(150, "GET /", "192.0.2.1", "tenant: a", "plan: paid"), 100)

	s = newServer(t, "cascade: true\n"+cfg, "tenant", "plan")
	expect(t, "cascade, free plan", s.passes(10, "GET /", "192.0.2.1", "tenant: c", "plan: free"), 5)
	expect(t, "cascade, another plan: the free requests counted for the tenant", s.passes(150, "GET /", "192.0.2.1", "tenant: c", "plan: paid"), 95)
}

// Wildcards anywhere in a value, each value counted apart unless
// share_threshold makes them share one counter.
func TestBehaveWildcards(t *testing.T) {
	s := newServer(t, `domain: w
descriptors:
  - key: client
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: client
    value: shared-*-x
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`, "client")
	expect(t, "bar-1-b", s.passes(5, "GET /", "192.0.2.1", "client: bar-1-b"), 2)
	expect(t, "bar-2-b, a counter of its own", s.passes(5, "GET /", "192.0.2.1", "client: bar-2-b"), 2)
	expect(t, "baz, no match", s.passes(5, "GET /", "192.0.2.1", "client: baz"), 5)
	expect(t, "shared-1-x", s.passes(2, "GET /", "192.0.2.1", "client: shared-1-x"), 2)
	expect(t, "shared-2-x, the same counter", s.passes(5, "GET /", "192.0.2.1", "client: shared-2-x"), 1)
}

// quota_mode admits over the limit, and unit_multiplier stretches the
// period.
func TestBehaveQuotaModeAndUnitMultiplier(t *testing.T) {
	s := newServer(t, `domain: q
descriptors:
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 2, unit_multiplier: 5}
`, "quota", "slow")
	expect(t, "quota mode", s.passes(5, "GET /", "192.0.2.1", "quota: a"), 5)
	expect(t, "5 minutes, first", s.passes(5, "GET /", "192.0.2.1", "slow: a"), 2)
	s.clock.Advance(time.Minute)
	expect(t, "a minute later, same 5-minute window", s.passes(5, "GET /", "192.0.2.1", "slow: a"), 0)
	s.clock.Advance(4 * time.Minute)
	expect(t, "the next 5-minute window", s.passes(5, "GET /", "192.0.2.1", "slow: a"), 2)
}
