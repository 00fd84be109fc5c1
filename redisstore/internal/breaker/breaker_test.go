package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/internal/breaker"
)

// replyError is an answer of Redis's.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestOutage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("BUSY Redis is busy running a script"), true},
		{fmt.Errorf("wrapped: %w", replyError("CLUSTERDOWN The cluster is down")), true},
		{context.Canceled, false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("ERR user_script:1: something"), false},
	} {
		if got := breaker.Outage(c.err); got != c.want {
			t.Errorf("Outage(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

// TestTripAndProbe: outage errors in a row open the circuit, others and
// answers in between do not; the probe closes it when Redis is ready, and
// stops, leaving it open, when the client is closed.
func TestTripAndProbe(t *testing.T) {
	probes := make(chan chan error)
	ready := func(context.Context) error {
		answer := make(chan error)
		probes <- answer
		return <-answer
	}
	c := breaker.New(ready, time.Second)
	for range 2 * breaker.TripAfter {
		c.Failed(context.Canceled)
		c.Failed(replyError("WRONGTYPE"))
	}
	for range breaker.TripAfter - 1 {
		c.Failed(context.DeadlineExceeded)
	}
	c.Answered()
	for range breaker.TripAfter - 1 {
		if c.Failed(context.DeadlineExceeded) {
			t.Fatal("open before TripAfter outage errors in a row")
		}
	}
	if !c.Failed(context.DeadlineExceeded) || !c.IsOpen() {
		t.Fatal("closed after TripAfter outage errors in a row")
	}
	(<-probes) <- errors.New("still down") // the first probe fails
	if !c.IsOpen() {
		t.Fatal("closed after a failed probe")
	}
	answer := <-probes
	answer <- nil // Redis is ready
	for deadline := time.Now().Add(5 * time.Second); c.IsOpen(); {
		if time.Now().After(deadline) {
			t.Fatal("still open after a probe that worked")
		}
	}

	c.Trip()
	(<-probes) <- redis.ErrClosed // the client is closed: the probe stops for good, the circuit stays open
	if !c.IsOpen() {
		t.Error("closed by a probe that found the client closed")
	}
}
