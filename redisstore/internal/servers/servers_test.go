package servers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/internal/servers"
)

func TestAppliesDeadlines(t *testing.T) {
	for _, c := range []struct {
		client redis.UniversalClient
		want   bool
	}{
		{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
	} {
		if got := servers.AppliesDeadlines(c.client); got != c.want {
			t.Errorf("%T: %t, want %t", c.client, got, c.want)
		}
		_ = c.client.Close()
	}
}

// TestByDeadline: with a client that applies deadlines the function runs
// as it is; with one that does not, ByDeadline returns at the deadline and
// the function goes on.
func TestByDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- servers.ByDeadline(ctx, false, func(context.Context) error { <-release; return nil })
	}()
	cancel() // the deadline
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("ByDeadline returned %v, want the context's error", err)
	}
	close(release) // the function ends on its own

	want := errors.New("answered")
	if err := servers.ByDeadline(context.Background(), true, func(context.Context) error { return want }); err != want {
		t.Errorf("ByDeadline returned %v, want %v", err, want)
	}
	if err := servers.ByDeadline(context.Background(), false, func(context.Context) error { return want }); err != want {
		t.Errorf("ByDeadline returned %v, want %v", err, want)
	}
}

func TestEachMasterRefusesOtherClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var c redis.UniversalClient = struct{ redis.UniversalClient }{} // neither a client, a cluster nor a ring
	if err := servers.EachMaster(ctx, c, func(context.Context, *redis.Client) error { return nil }); err == nil {
		t.Error("no error")
	}
}
