package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/adaptertest"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rulesredis"
)

// waitTimeout bounds every wait for something asynchronous: a server
// getting ready, a reload, a scan, a shutdown.
const waitTimeout = 20 * time.Second

// syncBuffer is a log shared by the server's goroutines and the test.
type syncBuffer struct{ adaptertest.SyncBuffer }

// lines counts the log lines holding every one of parts.
func (s *syncBuffer) lines(parts ...string) int {
	n := 0
	for _, l := range strings.Split(s.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

// recorder records what the server's hooks report.
type recorder struct {
	mu      sync.Mutex
	reloads []reload
	scans   int
	changed chan struct{} // closed, and replaced, at each record
}

type reload struct {
	source string
	err    error
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) note(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) reloaded(source string, err error) {
	r.note(func() { r.reloads = append(r.reloads, reload{source, err}) })
}

func (r *recorder) scanned() { r.note(func() { r.scans++ }) }

// wait waits until cond, called under the recorder's lock, holds.
func (r *recorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// mark returns the number of reloads and scans so far.
func (r *recorder) mark() (reloads, scans int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reloads), r.scans
}

// waitReload waits for a reload of source after the first `after` ones,
// and returns its error.
func (r *recorder) waitReload(t *testing.T, after int, source string) error {
	t.Helper()
	var err error
	r.wait(t, "a reload of "+source, func() bool {
		for _, rl := range r.reloads[after:] {
			if rl.source == source {
				err = rl.err
				return true
			}
		}
		return false
	})
	return err
}

// waitScans waits for n whole scans after the first `after` ones: the
// last of them started after the call.
func (r *recorder) waitScans(t *testing.T, after, n int) {
	t.Helper()
	r.wait(t, "directory scans", func() bool { return r.scans >= after+n })
}

// server is a ratekit serve running in the test's process.
type server struct {
	grpcAddr, httpAddr string
	log                *syncBuffer
	rec                *recorder
	rl                 rlspb.RateLimitServiceClient
	conn               *grpc.ClientConn
	cancel             context.CancelFunc
	done               chan error
	stopped            bool
	err                error
}

// startServe runs ratekit serve with args, on ports of 127.0.0.1 the
// system chooses, and returns once it is ready. It is stopped when the
// test ends.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{log: &syncBuffer{}, rec: newRecorder(), done: make(chan error, 1)}
	ready := make(chan [2]string, 1)
	hooks := &serveHooks{
		ready:    func(g, h string) { ready <- [2]string{g, h} },
		reloaded: s.rec.reloaded,
		scanned:  s.rec.scanned,
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), hooksKey{}, hooks))
	s.cancel = cancel
	full := append([]string{"serve", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}, args...)
	go func() { s.done <- run(ctx, full, strings.NewReader(""), io.Discard, s.log) }()
	t.Cleanup(func() {
		if err := s.stop(t); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-ready:
		s.grpcAddr, s.httpAddr = a[0], a[1]
	case err := <-s.done:
		s.stopped = true
		t.Fatalf("serve ended before it was ready: %v; log:\n%s", err, s.log)
	case <-time.After(waitTimeout):
		t.Fatalf("serve not ready in %s; log:\n%s", waitTimeout, s.log)
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.conn, s.rl = conn, rlspb.NewRateLimitServiceClient(conn)
	return s
}

// stop cancels the server's context and waits for run to return.
func (s *server) stop(t *testing.T) error {
	t.Helper()
	if s.stopped {
		return s.err
	}
	s.cancel()
	select {
	case s.err = <-s.done:
	case <-time.After(waitTimeout):
		t.Fatalf("serve did not return within %s of its context's end; log:\n%s", waitTimeout, s.log)
	}
	s.stopped = true
	return s.err
}

// desc is a descriptor of key-value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask asks the server about a request of domain with descriptors.
func (s *server) ask(t *testing.T, domain string, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := s.rl.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v; log:\n%s", domain, err, s.log)
	}
	return resp
}

// want checks an answer of one descriptor: the overall code, and the
// descriptor's limit (requests per unit, unit; 0 and "" for none) and
// what remains of it.
func want(t *testing.T, resp *rlspb.RateLimitResponse, code rlspb.RateLimitResponse_Code, limit uint32, unit string, remaining uint32) {
	t.Helper()
	if resp.OverallCode != code || len(resp.Statuses) != 1 {
		t.Fatalf("answer %v, want overall code %v and one status", resp, code)
	}
	st := resp.Statuses[0]
	gotLimit, gotUnit := uint32(0), ""
	if st.CurrentLimit != nil {
		gotLimit, gotUnit = st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit.String()
	}
	if gotLimit != limit || gotUnit != unit || st.LimitRemaining != remaining {
		t.Fatalf("status %v: limit %d %s, %d remaining; want %d %s, %d remaining", st, gotLimit, gotUnit, st.LimitRemaining, limit, unit, remaining)
	}
}

func (s *server) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// writeAtomic replaces a file's content at once, as editors and
// Kubernetes do, so that no reader sees half of it.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// config is a one-descriptor config: per remote address, n per unit.
func config(domain string, n int, unit string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: " + unit + "\n      requests_per_unit: " + itoa(n) + "\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// TestServe runs the documented sample config (testdata/serve/config.yaml)
// on the memory store and asks it over gRPC and HTTP.
func TestServe(t *testing.T) {
	t.Parallel()
	s := startServe(t, "-config", "testdata/serve/config.yaml", "-response-headers", "-limit-overrides", "-max-message-bytes", "4096", "-shutdown-timeout", "10s")

	// The ready line, exactly, with the addresses bound.
	if n := s.log.lines("ratekit serve: listening grpc=" + s.grpcAddr + " http=" + s.httpAddr); n != 1 {
		t.Fatalf("%d ready lines; log:\n%s", n, s.log)
	}
	if !regexp.MustCompile(`(?m)^ratekit serve: listening grpc=127\.0\.0\.1:\d+ http=127\.0\.0\.1:\d+$`).MatchString(s.log.String()) {
		t.Fatalf("no ready line of the contract's form; log:\n%s", s.log)
	}

	t.Run("decisions", func(t *testing.T) {
		want(t, s.ask(t, "edge", desc("remote_address", "203.0.113.1")), ok, 50, "SECOND", 49)
		want(t, s.ask(t, "edge", desc("remote_address", "10.0.0.9")), ok, 0, "", math.MaxUint32)
		want(t, s.ask(t, "edge", desc("remote_address", "192.0.2.66")), over, 0, "SECOND", 0)
		for i := uint32(3); i > 0; i-- {
			want(t, s.ask(t, "edge", desc("generic_key", "login", "remote_address", "203.0.113.2")), ok, 3, "HOUR", i-1)
		}
		resp := s.ask(t, "edge", desc("generic_key", "login", "remote_address", "203.0.113.2"))
		want(t, resp, over, 3, "HOUR", 0)
		if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
			t.Errorf("duration until reset %s, want within the hour", d)
		}
		// The headers of -response-headers, of the descriptor over its limit.
		h := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		if h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] == "" {
			t.Errorf("response headers %v", h)
		}
		// Shadow mode: counted, reported, not enforced.
		want(t, s.ask(t, "edge", desc("plan", "free", "api_key", "k1")), ok, 1000, "DAY", 999)
		// A descriptor no rule matches, a domain not configured.
		want(t, s.ask(t, "edge", desc("plan", "pro", "api_key", "k1")), ok, 0, "", 0)
		want(t, s.ask(t, "other", desc("remote_address", "203.0.113.1")), ok, 0, "", 0)
		// All or nothing: a request over one limit is counted by none.
		resp = s.ask(t, "edge", desc("remote_address", "203.0.113.3"), desc("generic_key", "login", "remote_address", "203.0.113.2"))
		if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[0].LimitRemaining != 50 || resp.Statuses[1].Code != over {
			t.Fatalf("answer %v", resp)
		}
		want(t, s.ask(t, "edge", desc("remote_address", "203.0.113.3")), ok, 50, "SECOND", 49)
		// -limit-overrides: the descriptor's own limit.
		o := desc("remote_address", "203.0.113.10")
		o.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		want(t, s.ask(t, "edge", o), ok, 1, "HOUR", 0)
		want(t, s.ask(t, "edge", o), over, 1, "HOUR", 0)
	})

	t.Run("errors", func(t *testing.T) {
		_, err := s.rl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge"})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("no descriptors: %v, want InvalidArgument", err)
		}
		big := strings.Repeat("x", 8000)
		_, err = s.rl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", big)}})
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("a request over -max-message-bytes: %v, want ResourceExhausted", err)
		}
		want(t, s.ask(t, "edge", desc("remote_address", "203.0.113.4")), ok, 50, "SECOND", 49)
	})

	t.Run("http", func(t *testing.T) {
		if code, body := s.get(t, "/healthcheck"); code != 200 || body != "OK" {
			t.Errorf("GET /healthcheck: %d %q", code, body)
		}
		post := func(body string) (int, map[string]any) {
			resp, err := http.Post("http://"+s.httpAddr+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			return resp.StatusCode, m
		}
		req := `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"203.0.113.5"}]}]}`
		for range 3 {
			if code, m := post(req); code != 200 || m["overallCode"] != "OK" {
				t.Fatalf("POST /json: %d %v", code, m)
			}
		}
		if code, m := post(req); code != 429 || m["overallCode"] != "OVER_LIMIT" {
			t.Fatalf("POST /json over the limit: %d %v", code, m)
		}
		if code, _ := post(`{"domain":`); code != 400 {
			t.Errorf("POST /json of a broken body: %d, want 400", code)
		}
		if code, _ := s.get(t, "/json"); code != http.StatusMethodNotAllowed {
			t.Errorf("GET /json: %d, want 405", code)
		}
		code, body := s.get(t, "/metrics")
		for _, series := range []string{
			`ratekit_requests_total{decision="allowed",limit="edge/generic_key:login/remote_address"} 6`,
			`ratekit_requests_total{decision="denied",limit="edge/generic_key:login/remote_address"}`,
			`ratekit_tracked_keys{limit="edge/remote_address"}`,
			"go_goroutines ",
			"process_open_fds ",
		} {
			if code != 200 || !strings.Contains(body, series) {
				t.Errorf("GET /metrics: %d, no %s in:\n%s", code, series, body)
			}
		}
	})

	t.Run("reflection", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sv := range resp.GetListServicesResponse().GetService() {
			names = append(names, sv.Name)
		}
		got := strings.Join(names, " ")
		for _, n := range []string{rlsService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !strings.Contains(got, n) {
				t.Errorf("reflection lists %q, not %s", got, n)
			}
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		hc := healthpb.NewHealthClient(s.conn)
		for _, name := range []string{"", rlsService} {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health of %q: %v %v", name, r, err)
			}
		}
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
			t.Errorf("health of an unknown service: %v, want NotFound", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watch: %v %v", r, err)
		}
		start := time.Now()
		s.cancel()
		if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watch at shutdown: %v %v", r, err)
		}
		if r, err := watch.Recv(); err != io.EOF {
			t.Fatalf("watch after NOT_SERVING: %v %v, want the end of the stream", r, err)
		}
		if err := s.stop(t); err != nil {
			t.Fatalf("serve returned %v", err)
		}
		// The Watch stream did not hold the graceful stop to its timeout (10s).
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("shutdown took %s", d)
		}
		if !strings.HasSuffix(s.log.String(), "ratekit serve: stopped\n") {
			t.Errorf("log does not end with the stop:\n%s", s.log)
		}
		if _, err := net.DialTimeout("tcp", s.httpAddr, time.Second); err == nil {
			t.Error("the HTTP listener is still open")
		}
	})
}

// TestServeDirectory serves a directory of configs and changes it:
// reloads, a broken file, a duplicate domain, files added and removed.
func TestServeDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")
	writeAtomic(t, a, config("a", 2, "hour"))
	writeAtomic(t, b, config("b", 1, "hour"))
	// Not config files: hidden, or of another extension.
	writeAtomic(t, filepath.Join(dir, "notes.txt"), "not yaml")
	writeAtomic(t, filepath.Join(dir, ".hidden.yaml"), "domain: [broken")
	s := startServe(t, "-config", dir, "-watch-interval", "20ms")
	ip := func(n string) *rlv3.RateLimitDescriptor { return desc("remote_address", "198.51.100."+n) }

	want(t, s.ask(t, "a", ip("1")), ok, 2, "HOUR", 1)
	want(t, s.ask(t, "a", ip("1")), ok, 2, "HOUR", 0)
	want(t, s.ask(t, "a", ip("1")), over, 2, "HOUR", 0)
	want(t, s.ask(t, "b", ip("1")), ok, 1, "HOUR", 0)
	want(t, s.ask(t, "b", ip("1")), over, 1, "HOUR", 0)

	t.Run("reload keeps counts", func(t *testing.T) {
		n, _ := s.rec.mark()
		writeAtomic(t, a, config("a", 3, "hour"))
		if err := s.rec.waitReload(t, n, a); err != nil {
			t.Fatalf("reload: %v", err)
		}
		// 2 of 3 used: one left.
		want(t, s.ask(t, "a", ip("1")), ok, 3, "HOUR", 0)
		want(t, s.ask(t, "a", ip("1")), over, 3, "HOUR", 0)
	})

	t.Run("broken file keeps the rules", func(t *testing.T) {
		n, _ := s.rec.mark()
		writeAtomic(t, b, "domain: b\ndescriptors:\n  - key: remote_address\n    rate_limt: {unit: hour, requests_per_unit: 9}\n")
		if err := s.rec.waitReload(t, n, b); err == nil || !strings.Contains(err.Error(), "rate_limt") {
			t.Fatalf("reload of a broken file: %v", err)
		}
		want(t, s.ask(t, "b", ip("2")), ok, 1, "HOUR", 0)
		want(t, s.ask(t, "b", ip("2")), over, 1, "HOUR", 0)
		_, scans := s.rec.mark()
		s.rec.waitScans(t, scans, 5) // several polls of the file too
		if n := s.log.lines("WARN ratekit: rules reload rejected; previous rules kept", "path="+b, "rate_limt"); n != 1 {
			t.Fatalf("the rejection logged %d times; log:\n%s", n, s.log)
		}
	})

	t.Run("domain taken", func(t *testing.T) {
		n, _ := s.rec.mark()
		writeAtomic(t, a, config("b", 5, "hour"))
		if err := s.rec.waitReload(t, n, a); err == nil || !strings.Contains(err.Error(), `domain "b" is served already, from `+b) {
			t.Fatalf("reload of a's file to domain b: %v", err)
		}
		want(t, s.ask(t, "a", ip("3")), ok, 3, "HOUR", 2)
		want(t, s.ask(t, "b", ip("3")), ok, 1, "HOUR", 0)
	})

	c, d := filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")
	t.Run("file added", func(t *testing.T) {
		_, scans := s.rec.mark()
		writeAtomic(t, c, config("c", 1, "hour"))
		s.rec.waitScans(t, scans, 2)
		want(t, s.ask(t, "c", ip("1")), ok, 1, "HOUR", 0)
		want(t, s.ask(t, "c", ip("1")), over, 1, "HOUR", 0)
		if n := s.log.lines("ratekit serve: config file added", "path="+c, "domain=c"); n != 1 {
			t.Errorf("%d lines of the file added; log:\n%s", n, s.log)
		}
	})

	t.Run("file added with a domain taken", func(t *testing.T) {
		_, scans := s.rec.mark()
		writeAtomic(t, d, config("c", 7, "hour"))
		s.rec.waitScans(t, scans, 6)
		want(t, s.ask(t, "c", ip("2")), ok, 1, "HOUR", 0)
		if n := s.log.lines("rules reload rejected", "path="+d, `domain \"c\" is served already`); n != 1 {
			t.Errorf("the duplicate domain logged %d times; log:\n%s", n, s.log)
		}
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("file removed", func(t *testing.T) {
		if code, body := s.get(t, "/metrics"); code != 200 || !strings.Contains(body, `limit="c/remote_address"`) {
			t.Fatalf("GET /metrics: %d, no series of c:\n%s", code, body)
		}
		_, scans := s.rec.mark()
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
		s.rec.waitScans(t, scans, 2)
		want(t, s.ask(t, "c", ip("1")), ok, 0, "", 0)
		want(t, s.ask(t, "a", ip("4")), ok, 3, "HOUR", 2)
		if n := s.log.lines("ratekit serve: config file removed", "path="+c, "domain=c"); n != 1 {
			t.Errorf("%d lines of the file removed; log:\n%s", n, s.log)
		}
		if _, body := s.get(t, "/metrics"); strings.Contains(body, `limit="c/remote_address"`) {
			t.Errorf("the series of the removed file's limits remain:\n%s", body)
		}
	})
}

// TestServeRedis shares the counts of two servers in one Redis, one with
// its rules in a file, the other with the same rules in Redis; the
// password comes from RATEKIT_REDIS_PASSWORD.
func TestServeRedis(t *testing.T) {
	// Not parallel: t.Setenv.
	rs := redistest.Start(t)
	if err := rs.Client(t).ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envPassword, "s3cret")
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), Password: "s3cret"})
	t.Cleanup(func() { rdb.Close() })
	const key = "ratekit:rules:edge"
	if err := rulesredis.Publish(context.Background(), rdb, key, []byte(config("edge", 3, "hour")), nil); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "edge.yaml")
	writeAtomic(t, file, config("edge", 3, "hour"))

	fromFile := startServe(t, "-config", file, "-store", "redis", "-redis", rs.Addr())
	fromRedis := startServe(t, "-rules-redis-key", key, "-store", "redis", "-redis", rs.Addr(), "-fail", "closed")
	ip := desc("remote_address", "203.0.113.9")
	want(t, fromFile.ask(t, "edge", ip), ok, 3, "HOUR", 2)
	want(t, fromRedis.ask(t, "edge", ip), ok, 3, "HOUR", 1)
	want(t, fromFile.ask(t, "edge", ip), ok, 3, "HOUR", 0)
	want(t, fromRedis.ask(t, "edge", ip), over, 3, "HOUR", 0)

	n, _ := fromRedis.rec.mark()
	if err := rulesredis.Publish(context.Background(), rdb, key, []byte(config("edge", 4, "hour")), nil); err != nil {
		t.Fatal(err)
	}
	if err := fromRedis.rec.waitReload(t, n, "redis:"+key); err != nil {
		t.Fatalf("reload from Redis: %v", err)
	}
	want(t, fromRedis.ask(t, "edge", ip), ok, 4, "HOUR", 0)
	want(t, fromFile.ask(t, "edge", ip), over, 3, "HOUR", 0)
	if _, body := fromRedis.get(t, "/metrics"); !strings.Contains(body, `ratekit_store_duration_seconds_count{limit="edge/remote_address",store="redis"}`) {
		t.Errorf("no store durations of redis in:\n%s", body)
	}

	code, stderr := runArgs(t, "serve", "-rules-redis-key", "no:such:key", "-redis", rs.Addr(), "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "-rules-redis-key no:such:key") {
		t.Errorf("a missing key: exit %d; stderr:\n%s", code, stderr)
	}
}

// TestServeHybrid decides on the hybrid store.
func TestServeHybrid(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	writeAtomic(t, file, config("edge", 2, "hour"))
	s := startServe(t, "-config", file, "-store", "hybrid", "-redis", rs.Addr(), "-hybrid-interval", "50ms", "-shadow", "-log-format", "json")
	ip := desc("remote_address", "203.0.113.9")
	want(t, s.ask(t, "edge", ip), ok, 2, "HOUR", 1)
	want(t, s.ask(t, "edge", ip), ok, 2, "HOUR", 0)
	// -shadow: over the limit, and answered OK.
	if resp := s.ask(t, "edge", ip); resp.OverallCode != ok || resp.Statuses[0].Code != over {
		t.Errorf("answer in shadow mode: %v", resp)
	}
	if n := s.log.lines(`"msg":"ratekit serve: listening","grpc":"` + s.grpcAddr + `","http":"` + s.httpAddr + `"`); n != 1 {
		t.Errorf("no JSON ready line; log:\n%s", s.log)
	}
}

// TestServeRedisDown starts with a Redis that does not answer: an error
// when decisions fail closed, a warning when they fail open.
func TestServeRedisDown(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", itoa(redistest.FreePort(t)))
	file := filepath.Join(t.TempDir(), "edge.yaml")
	writeAtomic(t, file, config("edge", 2, "hour"))
	code, stderr := runArgs(t, "serve", "-config", file, "-store", "redis", "-redis", addr, "-fail", "closed", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "ratekit: redis at "+addr+" does not answer") {
		t.Errorf("fail closed: exit %d; stderr:\n%s", code, stderr)
	}
	s := startServe(t, "-config", file, "-store", "redis", "-redis", addr)
	if n := s.log.lines("WARN ratekit serve: redis does not answer"); n != 1 {
		t.Errorf("%d warnings; log:\n%s", n, s.log)
	}
	// Admitted: the store fails, open.
	resp := s.ask(t, "edge", desc("remote_address", "203.0.113.9"))
	if resp.OverallCode != ok {
		t.Errorf("answer %v", resp)
	}
}

// runArgs runs ratekit with args to its end; it returns the exit status
// and standard error.
func runArgs(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := run(ctx, args, strings.NewReader(""), io.Discard, &stderr)
	return cli.ExitCode("ratekit", err, &stderr), stderr.String()
}

// TestServeFlags checks that bad flags and configs are refused with a
// clear message and the right exit status.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	good := "testdata/serve/config.yaml"
	dup := t.TempDir()
	writeAtomic(t, filepath.Join(dup, "one.yaml"), config("x", 1, "hour"))
	writeAtomic(t, filepath.Join(dup, "two.yaml"), config("x", 2, "hour"))
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	writeAtomic(t, broken, "domain: x\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	local := []string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "usage: ratekit serve [flags]"},
		{nil, 2, "no rules: give -config PATH"},
		{[]string{"-config", good, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-config", good, "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"-config", good, "-store", "disk"}, 2, `-store "disk": unknown store (valid: memory, redis, hybrid)`},
		{[]string{"-config", good, "-store", "redis"}, 2, "-store redis needs -redis ADDR"},
		{[]string{"-config", good, "-redis", "127.0.0.1:6379"}, 2, "-redis applies only with -store redis or hybrid"},
		{[]string{"-config", good, "-store", "redis", "-redis", "nowhere"}, 2, `-redis: "nowhere" is not HOST:PORT`},
		{[]string{"-config", good, "-store", "redis", "-redis", "redis://u:pw@h:1"}, 2, "RATEKIT_REDIS_PASSWORD"},
		{[]string{"-config", good, "-redis-password", "x"}, 2, "-redis-password: not a flag"},
		{[]string{"-config", good, "-region", "eu"}, 2, "-region applies only with -store hybrid"},
		{[]string{"-config", good, "-store", "hybrid", "-redis", "h:1", "-region", "eu"}, 2, "-region needs -peer"},
		{[]string{"-config", good, "-store", "hybrid", "-redis", "h:1", "-peer", "us"}, 2, "want NAME=ADDR"},
		{[]string{"-config", good, "-store", "hybrid", "-redis", "h:1", "-region", "eu", "-peer", "eu=h:2"}, 2, "that is this region"},
		{[]string{"-config", good, "-store", "hybrid", "-redis", "h:1", "-hybrid-interval", "0s"}, 2, "-hybrid-interval 0s: must be from 10ms to 1m"},
		{[]string{"-config", good, "-fail", "maybe"}, 2, `-fail "maybe": unknown mode (valid: open, closed)`},
		{[]string{"-config", good, "-max-message-bytes", "10"}, 2, "-max-message-bytes 10: must be from 1024"},
		{[]string{"-config", good, "-max-streams", "0"}, 2, "-max-streams 0: must be from 1"},
		{[]string{"-config", good, "-shutdown-timeout", "-1s"}, 2, "-shutdown-timeout -1s: must be positive"},
		{[]string{"-config", good, "-watch-interval", "1ms"}, 2, "-watch-interval 1ms: must be from 10ms"},
		{[]string{"-config", good, "-log-level", "loud"}, 2, `-log-level "loud": unknown level`},
		{[]string{"-config", good, "-log-format", "xml"}, 2, `-log-format "xml": unknown format`},
		{[]string{"-config", good, "-rules-redis-key", "k"}, 2, "-config and -rules-redis-key: give one source"},
		{[]string{"-rules-redis-key", "k"}, 2, "-rules-redis-key needs -redis ADDR"},
		{[]string{"-config", filepath.Join(t.TempDir(), "none.yaml")}, 1, "-config: stat"},
		{[]string{"-config", t.TempDir()}, 1, "holds no config file (*.yaml or *.yml)"},
		{[]string{"-config", dup}, 1, `domain "x" is served already, from ` + filepath.Join(dup, "one.yaml")},
		{[]string{"-config", broken}, 1, `unknown key "rate_limt"`},
		{[]string{"-config", good, "-grpc", busy.Addr().String()}, 1, "-grpc: listen tcp " + busy.Addr().String()},
	} {
		args := append([]string{"serve"}, c.args...)
		if c.code == 1 {
			args = append(append([]string{"serve"}, local...), c.args...)
		}
		code, stderr := runArgs(t, args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want %d with %q; stderr:\n%s", c.args, code, c.code, c.want, stderr)
		}
	}
}

// TestServeEnv checks the environment variables: each flag's, a flag
// beating its variable, the lists, the password.
func TestServeEnv(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (*serveConfig, error) {
		return parseServe(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	}
	cfg, err := parse(map[string]string{
		"RATEKIT_CONFIG": "c.yaml", "RATEKIT_STORE": "hybrid", "RATEKIT_REDIS_ADDR": "10.0.0.5:6379", envPassword: "pw",
		"RATEKIT_REGION": "eu", "RATEKIT_PEERS": "us=10.1.0.5:6379, ap=10.2.0.5:6379", "RATEKIT_SHADOW": "true",
		"RATEKIT_GRPC_ADDR": ":9081", "RATEKIT_HTTP_ADDR": ":9080", "RATEKIT_FAIL": "closed", "RATEKIT_SHUTDOWN_TIMEOUT": "3s",
		"RATEKIT_MAX_STREAMS": "7", "RATEKIT_LOG_LEVEL": "", // empty: not set
	}, "-http", ":7080")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.config != "c.yaml" || cfg.store != "hybrid" || cfg.redisAddr != "10.0.0.5:6379" || cfg.redisPassword != "pw" ||
		cfg.region != "eu" || len(cfg.peers) != 2 || cfg.peers["ap"] != "10.2.0.5:6379" || !cfg.shadow ||
		cfg.grpcAddr != ":9081" || cfg.httpAddr != ":7080" || !cfg.failClosed || cfg.shutdown != 3*time.Second ||
		cfg.maxStreams != 7 || cfg.logLevel.String() != "INFO" {
		t.Errorf("config %+v", cfg)
	}
	// The flag beats its variable, even a bad one.
	if cfg, err := parse(map[string]string{"RATEKIT_STORE": "disk"}, "-config", "c.yaml", "-store", "memory"); err != nil || cfg.store != "memory" {
		t.Errorf("-store beside RATEKIT_STORE: %+v, %v", cfg, err)
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"RATEKIT_CONFIG": "c.yaml", "RATEKIT_STORE": "disk"}, `RATEKIT_STORE "disk": unknown store`},
		{map[string]string{"RATEKIT_CONFIG": "c.yaml", "RATEKIT_SHADOW": "yes"}, `RATEKIT_SHADOW="yes": parse error`},
		{map[string]string{"RATEKIT_CONFIG": "c.yaml", "RATEKIT_REDIS_ADDR": "h:1"}, "RATEKIT_REDIS_ADDR applies only with -store redis"},
		{map[string]string{"RATEKIT_RULES_REDIS_KEYS": "a,,b"}, `RATEKIT_RULES_REDIS_KEYS="": empty value`},
	} {
		_, err := parse(c.env)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error with %q", c.env, err, c.want)
		}
	}
	// Every flag has its variable.
	fs, _ := newServeFlags(io.Discard)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if serveEnv[f.Name] == "" {
			missing = append(missing, f.Name)
		}
	})
	if len(missing) > 0 {
		t.Errorf("flags without a variable: %v", missing)
	}
}

// fencedBlocks returns the contents of the Markdown document's fenced
// code blocks of language lang.
func fencedBlocks(doc, lang string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && l == "```"+lang:
			in, cur = true, nil
		case in && l == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	return blocks
}

// TestServeDoc checks docs/serve.md: its sample config is the one
// TestServe runs, its Envoy bootstrap passes Envoy's schema, and its table
// lists every flag and variable.
func TestServeDoc(t *testing.T) {
	t.Parallel()
	docBytes, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	sample, err := os.ReadFile("testdata/serve/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var samples, bootstraps []string
	for _, b := range fencedBlocks(doc, "yaml") {
		switch {
		case strings.Contains(b, "\ndomain: "):
			samples = append(samples, b)
		case strings.HasPrefix(b, "static_resources:"):
			bootstraps = append(bootstraps, b)
		}
	}
	if len(samples) != 1 || samples[0] != string(sample) {
		t.Errorf("the doc's sample config is not testdata/serve/config.yaml; the doc's:\n%s", strings.Join(samples, "\n---\n"))
	}
	if len(bootstraps) != 1 {
		t.Fatalf("%d Envoy bootstraps in the doc, want 1", len(bootstraps))
	}
	var tree any
	if err := yaml.Unmarshal([]byte(bootstraps[0]), &tree); err != nil {
		t.Fatalf("the bootstrap: %v", err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("the bootstrap is not Envoy's: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("the bootstrap is not valid: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitv3.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if rl.Domain != "edge" || rl.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "ratekit" {
		t.Errorf("the filter asks domain %q of cluster %v", rl.Domain, rl.RateLimitService)
	}
	fs, _ := newServeFlags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(doc, "| `-"+f.Name) || !strings.Contains(doc, "| `"+serveEnv[f.Name]+"` |") {
			t.Errorf("the doc's table lacks -%s or %s", f.Name, serveEnv[f.Name])
		}
	})
	if !strings.Contains(doc, "| `"+envPassword+"` |") {
		t.Errorf("the doc's table lacks %s", envPassword)
	}
}
