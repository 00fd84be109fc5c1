package adaptertest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
)

// A ShorthandMount builds an adapter's one-line middleware, its
// LimitByIP(count, period), in front of a route GET / that answers 200,
// and returns how to serve requests through it. The requests it serves
// carry their client's address in RemoteAddr, which the Serve must hand
// to the framework as the TCP peer. A ShorthandMount that is given an
// invalid limit panics, as LimitByIP does.
type ShorthandMount func(t *testing.T, count int, period time.Duration) Serve

// RunLimitByIP checks an adapter's LimitByIP: a limit of 2 per minute
// admits two requests of a client and rejects the third with 429,
// Retry-After and the header fields of stdhttp's LimitByIP; the key is
// the peer's address, whatever its port, and never a forwarding header
// (rotating X-Forwarded-For values change nothing); another client, or
// IPv6 clients of another /64, have budgets of their own, and clients of
// one /64 share one; an invalid limit (a negative count, a zero period, a
// period beyond core.MaxPeriod) panics with an error wrapping
// core.ErrInvalidLimit when the middleware is built.
func RunLimitByIP(t *testing.T, mount ShorthandMount) {
	t.Run("budget per client IP", func(t *testing.T) {
		adapter := mount(t, 2, time.Minute)
		for i, rq := range []struct {
			peer, xff string
			status    int
		}{
			{"192.0.2.10:4711", "", 200},
			{"192.0.2.10:4712", "198.51.100.1", 200}, // another port, a forged header: the same client
			{"192.0.2.10:4713", "198.51.100.2", 429},
			{"192.0.2.10:4711", "", 429},
			{"192.0.2.11:4711", "", 200}, // another client
			{"[2001:db8:1:2::1]:80", "", 200},
			{"[2001:db8:1:2::ff]:80", "", 200}, // the same /64
			{"[2001:db8:1:2::1]:81", "", 429},
			{"[2001:db8:1:3::1]:80", "", 200}, // another /64
		} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = rq.peer
			if rq.xff != "" {
				r.Header.Set("X-Forwarded-For", rq.xff)
				r.Header.Set("X-Real-IP", rq.xff)
			}
			res := adapter(r)
			what := fmt.Sprintf("request %d from %s", i, rq.peer)
			if res.StatusCode != rq.status {
				t.Fatalf("%s: status %d, want %d", what, res.StatusCode, rq.status)
			}
			if got := res.Header.Get(answer.HeaderLimit); got != "2" {
				t.Fatalf("%s: %s = %q, want 2", what, answer.HeaderLimit, got)
			}
			if rq.status == http.StatusTooManyRequests && res.Header.Get(answer.HeaderRetryAfter) == "" {
				t.Fatalf("%s: a rejection without Retry-After", what)
			}
		}
	})
	t.Run("invalid limits panic", func(t *testing.T) {
		for _, l := range []struct {
			count  int
			period time.Duration
		}{{-1, time.Minute}, {10, 0}, {10, -time.Second}, {10, core.MaxPeriod + time.Nanosecond}, {core.MaxCount + 1, time.Hour}} {
			err := func() (err error) {
				defer func() {
					r := recover()
					if r == nil {
						return
					}
					if e, ok := r.(error); ok {
						err = e
					} else {
						err = fmt.Errorf("panic with %v (%T), not an error", r, r)
					}
				}()
				mount(t, l.count, l.period)
				return nil
			}()
			if !errors.Is(err, core.ErrInvalidLimit) {
				t.Errorf("LimitByIP(%d, %v): panic %v, want an error wrapping core.ErrInvalidLimit", l.count, l.period, err)
			}
		}
	})
}
