package redistest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The timing tests below do not call t.Parallel, so that they run before
// the parallel tests and are not slowed down by them.

// proxyClient returns a go-redis client for p, closed by t.Cleanup.
func proxyClient(t *testing.T, p *Proxy, opt redis.Options) *redis.Client {
	t.Helper()
	opt.Addr = p.Addr()
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	p := StartProxy(t, Start(t).Addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", p.Addr())
	}
	rdb := proxyClient(t, p, redis.Options{})
	ctx := context.Background()
	if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	// A value of many chunks, with a delay, arrives whole and in order.
	p.SetDelay(5 * time.Millisecond)
	value := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := rdb.Set(ctx, "big", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, "big").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, value) {
		t.Fatalf("GET big returned %d bytes that differ from the %d set", len(got), len(value))
	}
}

func TestProxyDelay(t *testing.T) {
	const delay = 50 * time.Millisecond
	p := StartProxy(t, Start(t).Addr())
	rdb := proxyClient(t, p, redis.Options{PoolSize: 1})
	ctx := context.Background()
	// Open the connection first: the delay must apply to it too.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(delay)
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("PING with a one-way delay of %v took %v", delay, elapsed)
	if elapsed < 2*delay || elapsed > 2*time.Second {
		t.Fatalf("PING with a one-way delay of %v took %v, want at least %v", delay, elapsed, 2*delay)
	}
	p.SetDelay(0)
	start = time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed >= 2*delay {
		t.Fatalf("PING after SetDelay(0) took %v", elapsed)
	}
}

func TestProxyDelayDoesNotSerialise(t *testing.T) {
	const (
		delay = 50 * time.Millisecond
		n     = 20
	)
	p := StartProxy(t, Start(t).Addr())
	rdb := proxyClient(t, p, redis.Options{PoolSize: n + 1}) // n held, one for the pipeline
	ctx := context.Background()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		t.Cleanup(func() { _ = conns[i].Close() })
		if err := conns[i].Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Open the pipeline's connection too, while there is no delay.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := p.Conns(); got != n+1 {
		t.Fatalf("Conns() = %d, want %d", got, n+1)
	}
	p.SetDelay(delay)

	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d concurrent PINGs took %v", n, elapsed)
	// One after the other they would take n*2*delay = 2s.
	if elapsed < 2*delay || elapsed > time.Second {
		t.Fatalf("%d concurrent PINGs with a one-way delay of %v took %v, want between %v and 1s",
			n, delay, elapsed, 2*delay)
	}

	// On one connection, pipelined commands also share the delay.
	pipe := rdb.Pipeline()
	for range n {
		pipe.Ping(ctx)
	}
	start = time.Now()
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed = time.Since(start)
	t.Logf("a pipeline of %d PINGs took %v", n, elapsed)
	if elapsed < 2*delay || elapsed > time.Second {
		t.Fatalf("a pipeline of %d PINGs with a one-way delay of %v took %v, want between %v and 1s",
			n, delay, elapsed, 2*delay)
	}
}

func TestProxyCutAndHeal(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	p := StartProxy(t, Start(t).Addr())
	rdb := proxyClient(t, p, redis.Options{
		ReadTimeout:           readTimeout,
		WriteTimeout:          readTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              1,
	})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	// The open connection times out, and so does the connection the
	// client dials to replace it: the proxy accepts it, then drops
	// everything.
	for _, what := range []string{"on the open connection", "on a new connection"} {
		start := time.Now()
		err := rdb.Ping(ctx).Err()
		elapsed := time.Since(start)
		if !isTimeout(err) {
			t.Fatalf("PING %s during a cut: %v, want a timeout", what, err)
		}
		if elapsed < readTimeout*3/4 || elapsed > 2*time.Second {
			t.Fatalf("PING %s during a cut failed after %v, want about %v", what, elapsed, readTimeout)
		}
	}

	// A raw connection made during the cut is accepted and held open.
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dialling the proxy during a cut: %v", err)
	}
	defer raw.Close()
	if _, err := io.WriteString(raw, "PING\r\n"); err != nil {
		t.Fatalf("writing during a cut: %v", err)
	}
	if err := raw.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Read(make([]byte, 16)); !isTimeout(err) {
		t.Fatalf("reading during a cut: %v, want a timeout", err)
	}
	if p.Conns() == 0 {
		t.Fatal("Conns() = 0 during a cut, want the held connections")
	}

	p.Heal()
	// The connection held during the cut is closed.
	if err := raw.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.Read(make([]byte, 16)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("reading a connection held during the cut, after Heal: %d bytes, %v, want EOF", n, err)
	}
	// The client dials again and works.
	healed := func(cmd func() error) error {
		const tries = 3
		var err error
		for range tries {
			if err = cmd(); err == nil {
				return nil
			}
		}
		return err
	}
	if err := healed(func() error { return rdb.Set(ctx, "k", "v", 0).Err() }); err != nil {
		t.Fatalf("SET after Heal still fails after a few tries: %v", err)
	}

	// Cut and Heal again, and Heal without a cut, do no harm.
	p.Cut()
	p.Cut()
	p.Heal()
	p.Heal()
	var got string
	err = healed(func() (err error) {
		got, err = rdb.Get(ctx, "k").Result()
		return err
	})
	if err != nil || got != "v" {
		t.Fatalf("GET k after a second Heal = %q, %v", got, err)
	}
}

func TestProxyTargetDown(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	p := StartProxy(t, srv.Addr())
	srv.Stop(t)
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The proxy cannot reach the target and closes the connection.
	if _, err := raw.Read(make([]byte, 16)); err == nil || isTimeout(err) {
		t.Fatalf("reading through a proxy to a stopped server: %v, want the connection closed", err)
	}
}

func TestProxyCleanup(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	var (
		p               *Proxy
		passing, frozen net.Conn
	)
	t.Run("proxy", func(t *testing.T) {
		p = StartProxy(t, srv.Addr())
		var err error
		passing, err = net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(passing, "PING\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := passing.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, len("+PONG\r\n"))
		if _, err := io.ReadFull(passing, reply); err != nil || string(reply) != "+PONG\r\n" {
			t.Fatalf("PING on a raw connection = %q, %v", reply, err)
		}
		// Leave a command waiting out a long delay, and a connection held
		// by a cut: neither may hold up the cleanup.
		p.SetDelay(time.Hour)
		if _, err := io.WriteString(passing, "PING\r\n"); err != nil {
			t.Fatal(err)
		}
		p.Cut()
		frozen, err = net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
	})
	defer passing.Close()
	defer frozen.Close()

	// The subtest's cleanup has stopped the proxy.
	select {
	case <-p.done:
	default:
		t.Fatal("the proxy's goroutines are still running after cleanup")
	}
	if got := p.Conns(); got != 0 {
		t.Fatalf("Conns() = %d after cleanup, want 0", got)
	}
	if _, err := p.ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on the listener after cleanup: %v, want net.ErrClosed", err)
	}
	for name, c := range map[string]net.Conn{"passing": passing, "frozen": frozen} {
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 16)); !errors.Is(err, io.EOF) {
			t.Errorf("reading the %s connection after cleanup: %v, want EOF", name, err)
		}
	}
}
