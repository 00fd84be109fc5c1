package rulesredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/stdhttp"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// wait bounds every wait for a watcher.
const wait = 10 * time.Second

// key is the key of the tests' documents, on their private servers.
const key = "ratekit:rules:test"

// quiet drops go-redis's own log lines (one per failed dial while a test
// has stopped its server); the tests assert on ratekit's logs instead.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// doc returns a valid document whose one rule admits limit requests per
// minute per client: the X-RateLimit-Limit header tells which version an
// engine enforces.
func doc(limit int) string {
	return fmt.Sprintf("domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", limit)
}

// client returns a client of srv that gives up on a read quickly, as the
// package documentation recommends, and does not ask for maintenance
// notifications.
func client(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:                     srv.Addr(),
		ContextTimeoutEnabled:    true,
		DialTimeout:              time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count returns how many lines of the logs contain s.
func (s *syncBuffer) count(sub string) int {
	n := 0
	for _, line := range strings.Split(s.String(), "\n") {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

// An instance is one server of the fleet: an engine, its watcher and the
// middleware that decides requests by it.
type instance struct {
	t       *testing.T
	name    string
	engine  *rules.Engine
	w       *Watcher
	handler http.Handler
	logs    *syncBuffer
	hooks   chan error    // the reload hook's calls
	checks  chan struct{} // a value per check of the key after the first
}

// watch starts an instance watching key on rdb, which must hold a valid
// document, with the extra options.
func watch(t *testing.T, name string, rdb redis.UniversalClient, opts ...Option) *instance {
	t.Helper()
	e, err := rules.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{
		t: t, name: name, engine: e, logs: &syncBuffer{},
		hooks:  make(chan error, 1000),
		checks: make(chan struct{}, 1000),
	}
	opts = append([]Option{
		WithLogger(slog.New(slog.NewTextHandler(in.logs, nil))),
		WithReloadHook(func(err error) {
			select {
			case in.hooks <- err:
			default: // noticed as a missing call
			}
		}),
		func(c *config) {
			c.timeout = 200 * time.Millisecond
			c.onCheck = func() {
				select {
				case in.checks <- struct{}{}:
				default:
				}
			}
		},
	}, opts...)
	w, err := Watch(e, rdb, key, opts...)
	if err != nil {
		t.Fatalf("%s: Watch: %v", name, err)
	}
	in.w = w
	t.Cleanup(func() { _ = w.Close() })
	in.handler = stdhttp.Rules(e)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	return in
}

// limit decides a request through the instance's middleware and returns
// its X-RateLimit-Limit header: the limit of the rules in force.
func (in *instance) limit() string {
	rec := httptest.NewRecorder()
	in.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	return rec.Header().Get("X-RateLimit-Limit")
}

// next waits for the next call of the reload hook.
func (in *instance) next() error {
	in.t.Helper()
	select {
	case err := <-in.hooks:
		return err
	case <-time.After(wait):
		in.t.Fatalf("%s: no reload within %v; logs:\n%s", in.name, wait, in.logs)
		return nil
	}
}

// checked waits until the key has been checked n more times.
func (in *instance) checked(n int) {
	in.t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-in.checks:
		case <-time.After(wait):
			in.t.Fatalf("%s: the key was not checked within %v", in.name, wait)
		}
	}
}

// drainChecks forgets the checks done so far.
func (in *instance) drainChecks() {
	for {
		select {
		case <-in.checks:
		default:
			return
		}
	}
}

// noHook fails if the reload hook has been called.
func (in *instance) noHook() {
	in.t.Helper()
	select {
	case err := <-in.hooks:
		in.t.Errorf("%s: reload hook called with %v", in.name, err)
	default:
	}
}

func publish(t *testing.T, rdb redis.UniversalClient, data string) {
	t.Helper()
	if err := Publish(context.Background(), rdb, key, []byte(data), nil); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// TestFleetConverges: three servers watch one key; a version published
// reaches all three through Pub/Sub (they poll only hourly) within a
// second, and each then decides by it.
func TestFleetConverges(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(10))
	var fleet []*instance
	for i := 1; i <= 3; i++ {
		in := watch(t, fmt.Sprint("server", i), client(t, srv), WithPollInterval(time.Hour))
		if got := in.limit(); got != "10" {
			t.Fatalf("%s: limit %q after Watch, want 10", in.name, got)
		}
		// The check that follows the confirmation of the subscription:
		// from now on, messages reach it.
		in.checked(1)
		fleet = append(fleet, in)
	}

	for round, limit := range []int{20, 30} {
		start := time.Now()
		publish(t, rdb, doc(limit))
		for _, in := range fleet {
			if err := in.next(); err != nil {
				t.Fatalf("%s: reload failed: %v", in.name, err)
			}
		}
		took := time.Since(start)
		t.Logf("round %d: three servers converged in %v", round+1, took)
		if took > time.Second {
			t.Errorf("convergence took %v, want less than a second", took)
		}
		for _, in := range fleet {
			if got := in.limit(); got != fmt.Sprint(limit) {
				t.Errorf("%s: limit %q, want %d", in.name, got, limit)
			}
			want := fmt.Sprintf(`level=INFO msg="ratekit: rules reloaded" key=%s domain=api`, key)
			if n := in.logs.count(want); n != round+1 {
				t.Errorf("%s: %d reloads logged, want %d:\n%s", in.name, n, round+1, in.logs)
			}
		}
	}
}

// TestBadVersionRefused sets invalid documents directly, as a careless
// redis-cli SET would, bypassing Publish's checks: polling finds them,
// every server refuses them, logs each error once (however often it
// polls) and keeps its rules; the next good version applies.
func TestBadVersionRefused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(10))
	var fleet []*instance
	for i := 1; i <= 3; i++ {
		fleet = append(fleet, watch(t, fmt.Sprint("server", i), client(t, srv), WithPollInterval(10*time.Millisecond)))
	}

	for _, bad := range []struct {
		name, doc string
		errors    []string // each error, as logged
	}{
		{"invalid schema", "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limt: {unit: minute}\n  - kee: x\n",
			[]string{`error="redis:` + key + `:4: descriptors[0]: unknown key \"rate_limt\"`, `error="redis:` + key + `:5: descriptors[1]: unknown key \"kee\"`}},
		{"refused by the engine", strings.Replace(doc(10), "unit: minute", "unit: fortnight", 1) + "  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`error="redis:` + key + `:4: descriptors[0].rate_limit: unit \"fortnight\"`, `error="redis:` + key + `:7: descriptors[1].key: unknown descriptor key \"plan\"`}},
	} {
		t.Run(bad.name, func(t *testing.T) {
			before := make([]int, len(fleet))
			for i, in := range fleet {
				before[i] = in.logs.count("rules reload rejected")
			}
			if err := rdb.Set(context.Background(), key, bad.doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			for i, in := range fleet {
				err := in.next()
				var re *rules.Error
				if !errors.As(err, &re) || re.Source != "redis:"+key {
					t.Fatalf("%s: hook got %v, want a *rules.Error from redis:%s", in.name, err, key)
				}
				// Some more polls of the same bad version.
				in.drainChecks()
				in.checked(3)
				in.noHook()
				lines := strings.Split(strings.TrimSpace(in.logs.String()), "\n")
				var got []string
				for _, l := range lines {
					if strings.Contains(l, "rules reload rejected") {
						got = append(got, l)
					}
				}
				got = got[before[i]:]
				if len(got) != len(bad.errors) {
					t.Fatalf("%s: %d rejections logged, want %d, once:\n%s", in.name, len(got), len(bad.errors), in.logs)
				}
				for j, e := range bad.errors {
					want := `level=WARN msg="ratekit: rules reload rejected; previous rules kept" key=` + key + " " + e
					if !strings.Contains(got[j], want) {
						t.Errorf("%s: rejection %d:\n got %s\nwant %s...", in.name, j, got[j], want)
					}
				}
				if got := in.limit(); got != "10" {
					t.Errorf("%s: limit %q, want the good version's 10", in.name, got)
				}
			}
		})
	}

	publish(t, rdb, doc(20))
	for _, in := range fleet {
		if err := in.next(); err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		if got := in.limit(); got != "20" {
			t.Errorf("%s: limit %q, want 20", in.name, got)
		}
	}
}

// TestUnreadableValue: a key that vanishes, holds a value larger than
// MaxSize or one that is not a string is reported once each, and the
// rules stay; the same good document set again is loaded again.
func TestUnreadableValue(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	ctx := context.Background()
	publish(t, rdb, doc(10))
	in := watch(t, "server", client(t, srv), WithPollInterval(10*time.Millisecond))

	for _, step := range []struct {
		name string
		set  func() error
		want error
		log  string
	}{
		{"missing", func() error { return rdb.Del(ctx, key).Err() }, ErrNotFound,
			`level=WARN msg="ratekit: rules key missing; keeping the current rules" key=` + key},
		{"too large", func() error { return rdb.Set(ctx, key, strings.Repeat("#", MaxSize+1), 0).Err() }, ErrTooLarge,
			`level=WARN msg="ratekit: rules reload rejected; previous rules kept" key=` + key + ` error="rulesredis: rules document larger than 4 MiB: \"` + key + `\" holds 4194305 bytes"`},
		{"not a string", func() error {
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, key)
				p.HSet(ctx, key, "domain", "api")
				return nil
			})
			return err
		}, nil, `level=WARN msg="ratekit: rules reload rejected; previous rules kept" key=` + key + ` error="rulesredis: reading \"` + key + `\": WRONGTYPE`},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := step.set(); err != nil {
				t.Fatal(err)
			}
			err := in.next()
			if err == nil || step.want != nil && !errors.Is(err, step.want) {
				t.Fatalf("hook got %v, want %v", err, step.want)
			}
			in.drainChecks()
			in.checked(3)
			in.noHook()
			if n := in.logs.count(step.log); n != 1 {
				t.Errorf("%q logged %d times, want once:\n%s", step.log, n, in.logs)
			}
			if got := in.limit(); got != "10" {
				t.Errorf("limit %q, want the good version's 10", got)
			}
		})
	}

	// The document in force, set again: reloaded, as a file that
	// reappears is.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	publish(t, rdb, doc(10))
	for {
		err := in.next()
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("hook got %v", err)
		}
	}
	if n := in.logs.count(`msg="ratekit: rules reloaded"`); n != 1 {
		t.Errorf("%d reloads logged, want 1:\n%s", n, in.logs)
	}
}

// TestOutage stops Redis: every server keeps its rules and logs the
// outage once, however often it polls; when Redis is back (empty, as a
// restarted server without persistence is) each logs that once, reports
// the missing key, and applies the next version published.
func TestOutage(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(10))
	var fleet []*instance
	for i := 1; i <= 3; i++ {
		fleet = append(fleet, watch(t, fmt.Sprint("server", i), client(t, srv), WithPollInterval(10*time.Millisecond)))
	}

	srv.Stop(t)
	const down = `level=WARN msg="ratekit: rules source unreachable; keeping the current rules" key=` + key + ` error=`
	for _, in := range fleet {
		if err := in.next(); err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: hook got %v, want a connection error", in.name, err)
		}
		in.drainChecks()
		in.checked(3) // three more failed polls
		in.noHook()
		if n := in.logs.count(down); n != 1 {
			t.Errorf("%s: outage logged %d times, want once:\n%s", in.name, n, in.logs)
		}
		if got := in.limit(); got != "10" {
			t.Errorf("%s: limit %q during the outage, want 10", in.name, got)
		}
	}

	srv.Restart(t)
	for _, in := range fleet {
		if err := in.next(); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: hook got %v, want the missing key", in.name, err)
		}
		const back = `level=INFO msg="ratekit: rules source reachable again" key=` + key
		if n := in.logs.count(back); n != 1 {
			t.Errorf("%s: return logged %d times, want once:\n%s", in.name, n, in.logs)
		}
		if got := in.limit(); got != "10" {
			t.Errorf("%s: limit %q, want 10", in.name, got)
		}
	}

	publish(t, rdb, doc(20))
	for _, in := range fleet {
		if err := in.next(); err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		if got := in.limit(); got != "20" {
			t.Errorf("%s: limit %q after the outage, want 20", in.name, got)
		}
		if n := in.logs.count(down); n != 1 {
			t.Errorf("%s: outage logged %d times in all, want once:\n%s", in.name, n, in.logs)
		}
	}
}

// TestHang pauses Redis, which then accepts connections but answers
// nothing: reads time out, the outage is logged once and the rules stay;
// when Redis resumes, a version set meanwhile is loaded.
func TestHang(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(10))
	in := watch(t, "server", client(t, srv), WithPollInterval(10*time.Millisecond))

	srv.Pause(t)
	if err := in.next(); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("hook got %v, want a timeout", err)
	}
	in.drainChecks()
	in.checked(3)
	in.noHook()
	if n := in.logs.count("rules source unreachable"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, in.logs)
	}
	if got := in.limit(); got != "10" {
		t.Errorf("limit %q, want 10", got)
	}
	srv.Resume(t)
	publish(t, rdb, doc(20))
	if err := in.next(); err != nil {
		t.Fatal(err)
	}
	if got := in.limit(); got != "20" {
		t.Errorf("limit %q, want 20", got)
	}
	if n := in.logs.count("rules source reachable again"); n != 1 {
		t.Errorf("return logged %d times, want once:\n%s", n, in.logs)
	}
}

// TestUnchangedNotReloaded publishes the document in force again: the
// message makes the watcher read it, and it does not reload it.
func TestUnchangedNotReloaded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(10))
	var loads int
	var mu sync.Mutex
	target := targetFunc(func(c rules.Config) error {
		mu.Lock()
		defer mu.Unlock()
		loads++
		return nil
	})
	checks := make(chan struct{}, 100)
	w, err := Watch(target, client(t, srv), key, WithPollInterval(time.Hour), WithLogger(slog.New(slog.DiscardHandler)),
		WithReloadHook(func(err error) { t.Errorf("reload hook called with %v", err) }),
		func(c *config) { c.onCheck = func() { checks <- struct{}{} } })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-checks // after the subscription
	publish(t, rdb, doc(10))
	select {
	case <-checks:
	case <-time.After(wait):
		t.Fatal("the message did not make the watcher read the key")
	}
	mu.Lock()
	defer mu.Unlock()
	if loads != 1 {
		t.Errorf("%d loads, want only the first", loads)
	}
}

type targetFunc func(rules.Config) error

func (f targetFunc) Load(c rules.Config) error { return f(c) }

func TestWatchFails(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	ctx := context.Background()
	e, err := rules.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	for _, tc := range []struct {
		name string
		set  func() error
		want string
	}{
		{"missing key", func() error { return nil }, `rulesredis: key not found: "` + key + `"`},
		{"invalid document", func() error { return rdb.Set(ctx, key, "domain: [\n", 0).Err() }, "redis:" + key + ":1: invalid YAML"},
		{"refused by the target", func() error { return rdb.Set(ctx, key, strings.Replace(doc(1), "minute", "fortnight", 1), 0).Err() },
			"redis:" + key + `:4: descriptors[0].rate_limit: unit "fortnight"`},
		{"too large", func() error { return rdb.Set(ctx, key, strings.Repeat(" ", MaxSize+1), 0).Err() }, "rulesredis: rules document larger than 4 MiB"},
		{"wrong type", func() error { return rdb.LPush(ctx, key+":list", "x").Err() }, "WRONGTYPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.set(); err != nil {
				t.Fatal(err)
			}
			k := key
			if tc.name == "wrong type" {
				k = key + ":list"
			}
			w, err := Watch(e, rdb, k)
			if err == nil || !strings.Contains(err.Error(), tc.want) || w != nil {
				t.Errorf("Watch: got %v, %v, want an error with %q", w, err, tc.want)
			}
			rdb.Del(ctx, key)
		})
	}
	if got := e.Config().Domain; got != "" {
		t.Errorf("the engine got rules %q", got)
	}

	for _, tc := range []struct {
		name string
		t    rulesfile.Target
		rdb  redis.UniversalClient
		key  string
	}{
		{"nil target", nil, rdb, key},
		{"nil client", e, nil, key},
		{"empty key", e, rdb, ""},
	} {
		if _, err := Watch(tc.t, tc.rdb, tc.key); err == nil {
			t.Errorf("%s: Watch did not fail", tc.name)
		}
	}

	addr := srv.Addr()
	srv.Stop(t)
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer down.Close()
	if _, err := Watch(e, down, key); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Watch with Redis down: got %v", err)
	}
	waitGoroutines(t, before)
}

// TestClose closes watchers while versions keep being published: the
// hook is never called after Close returns, and no goroutine is left.
func TestClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	publish(t, rdb, doc(1))
	wrdb := client(t, srv)
	if err := wrdb.Ping(context.Background()).Err(); err != nil { // the pool's connection exists before counting
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	stop := make(chan struct{})
	publisher := make(chan struct{})
	stopPublisher := sync.OnceFunc(func() {
		close(stop)
		<-publisher
	})
	defer stopPublisher()
	go func() {
		defer close(publisher)
		for i := 2; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = Publish(context.Background(), rdb, key, []byte(doc(i)), nil)
		}
	}()

	for i := 0; i < 3; i++ {
		var mu sync.Mutex
		closed := false
		reloads := make(chan struct{}, 1)
		e, err := rules.NewEngine()
		if err != nil {
			t.Fatal(err)
		}
		w, err := Watch(e, wrdb, key, WithLogger(slog.New(slog.DiscardHandler)), WithReloadHook(func(error) {
			mu.Lock()
			defer mu.Unlock()
			if closed {
				t.Error("reload hook called after Close")
			}
			select {
			case reloads <- struct{}{}:
			default:
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-reloads:
		case <-time.After(wait):
			t.Fatal("no reload")
		}
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		mu.Lock()
		closed = true
		mu.Unlock()
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	stopPublisher()
	waitGoroutines(t, before)
}

// waitGoroutines waits, for a bounded time, until no more goroutines run
// than n: goroutines that have been told to exit may take a moment to.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines running, want %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond) // polling for goroutines to end, not timing
	}
}

// TestCluster: on a Redis Cluster, the document and its messages reach
// watchers connected to different nodes; they poll only hourly, so the
// new version reaches them through Pub/Sub.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	publish(t, rdb, doc(10))
	var fleet []*instance
	for i := 1; i <= 3; i++ {
		in := watch(t, fmt.Sprint("server", i), cluster.Client(t), WithPollInterval(time.Hour))
		in.checked(1) // subscribed
		fleet = append(fleet, in)
	}
	publish(t, rdb, doc(20))
	for _, in := range fleet {
		if err := in.next(); err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		if got := in.limit(); got != "20" {
			t.Errorf("%s: limit %q, want 20", in.name, got)
		}
	}
}
