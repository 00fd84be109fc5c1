package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

// stallRedis keeps the server busy with a script for about a second, as a
// slow command or a fork would, and returns once the server has stopped
// answering; the returned channel closes when the stall is over.
func stallRedis(t *testing.T, addr string) <-chan struct{} {
	t.Helper()
	block := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second})
	probe := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { block.Close(); probe.Close() })
	if err := probe.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = block.Eval(context.Background(), "local i = 0 while i < 60000000 do i = i + 1 end return i", nil).Err()
	}()
	for deadline := time.Now().Add(5 * time.Second); probe.Ping(context.Background()).Err() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the stall did not start")
		}
		time.Sleep(5 * time.Millisecond) // polling for the stall to begin
	}
	return done
}

// TestConcurrencyStoreTimeoutLeavesNoSlot: an acquire that times out while
// Redis is stalled still runs once Redis answers again. Whether the
// limiter refused it (fail closed) or admitted it (fail open), the slot
// must not stay taken by nobody: after the stall the key holds no lease,
// and a new request is admitted at once, not after the 30 s TTL.
func TestConcurrencyStoreTimeoutLeavesNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s, err := redisstore.New(rdb, redisstore.WithPrefix("stall"), redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limiter := func(name string, opts ...concurrency.Option) *concurrency.Limiter {
		opts = append(opts, concurrency.WithName(name), concurrency.WithStore(s.Concurrency()), concurrency.WithLeaseTTL(30*time.Second))
		lim, err := concurrency.NewLimiter(1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, warm, err := lim.Acquire(ctx, "warm") // loads the script
		if err != nil {
			t.Fatal(err)
		}
		warm.Release()
		return lim
	}
	closed := limiter("closed", concurrency.WithFailClosed())
	open := limiter("open")

	done := stallRedis(t, srv.Addr())
	if r, lease, err := closed.Acquire(ctx, "alice"); err == nil || r.Admitted || lease != nil {
		t.Fatalf("fail closed during the stall: admitted %t, err %v; want refused with the store's error", r.Admitted, err)
	}
	r, lease, err := open.Acquire(ctx, "alice")
	if err == nil || !r.Admitted {
		t.Fatalf("fail open during the stall: admitted %t, err %v; want admitted with the store's error", r.Admitted, err)
	}
	lease.Release() // the request ends
	<-done
	for name, lim := range map[string]*concurrency.Limiter{"closed": closed, "open": open} {
		// Another client's request: the store answers again.
		r, lease, err := lim.Acquire(ctx, "bob")
		if err != nil || !r.Admitted {
			t.Fatalf("fail %s: after the stall, another client: admitted %t, err %v", name, r.Admitted, err)
		}
		lease.Release()
	}

	var leases int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := rdb.Eval(ctx, "local n = 0 for _, k in ipairs(redis.call('KEYS', 'stall*')) do if redis.call('TYPE', k).ok == 'zset' then n = n + redis.call('ZCARD', k) end end return n", nil).Int()
		if err == nil {
			if leases = n; leases == 0 || time.Now().After(deadline) {
				break
			}
		}
	}
	if leases != 0 {
		t.Errorf("after the stall, with nothing in flight, Redis holds %d leases; want 0", leases)
	}
	for name, lim := range map[string]*concurrency.Limiter{"closed": closed, "open": open} {
		r, lease, err := lim.Acquire(ctx, "alice")
		if err != nil || !r.Admitted {
			t.Errorf("fail %s: after the stall: admitted %t, err %v; want admitted", name, r.Admitted, err)
		}
		lease.Release()
	}
}
