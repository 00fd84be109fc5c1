package main

import (
	"bytes"
	"context"
	"errors"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMain serves the floor when a test starts this test binary again in
// floor mode (TestStartFloor), as the command does with its own binary.
func TestMain(m *testing.M) {
	if addr, ok := os.LookupEnv(floorAddrEnv); ok {
		ctx, stop := signalContext()
		err := runFloor(ctx, addr)
		stop()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// callFloor calls ShouldRateLimit on addr with the descriptors' values.
func callFloor(t *testing.T, addr string, values ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	conn, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	for _, v := range values {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "hi", Value: v}},
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestFloorAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveFloor(ctx, l) }()

	resp := callFloor(t, l.Addr().String(), "a", "b")
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 2 {
		t.Fatalf("two descriptors: %v", resp)
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetRequestsPerUnit() != floorLimit ||
			st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			st.GetLimitRemaining() != floorLimit-1 || st.GetDurationUntilReset().GetSeconds() != 60 {
			t.Errorf("status = %v", st)
		}
	}
	if resp := callFloor(t, l.Addr().String()); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 0 {
		t.Errorf("no descriptor: %v", resp)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serveFloor after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serveFloor did not return after its context ended")
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Error("the floor still accepts connections after stopping")
	}
}

func TestRunFloorBadAddress(t *testing.T) {
	if err := runFloor(context.Background(), "no port"); err == nil || !strings.HasPrefix(err.Error(), "floor: ") {
		t.Fatalf("runFloor on a bad address: %v", err)
	}
}

func TestStartFloor(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := startFloor(context.Background(), bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if resp := callFloor(t, p.addr, "x"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
		t.Fatalf("answer = %v", resp)
	}
	if p.pid() == os.Getpid() {
		t.Fatal("the floor runs in this process")
	}
	if _, err := procCPU(p.pid()); err != nil {
		t.Fatalf("the floor's CPU time: %v", err)
	}
	if c := p.command(); !strings.HasPrefix(c, floorAddrEnv+"="+p.addr+" ") {
		t.Errorf("command = %q", c)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	default:
		t.Fatal("stop returned with the floor running")
	}
	if err := p.stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "floor.log")); err != nil {
		t.Error(err)
	}
}

func TestStartFloorFailure(t *testing.T) {
	// A binary that exits at once: the error says so, with its log.
	_, err := startFloor(context.Background(), "/bin/false", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "exited before answering") {
		t.Fatalf("startFloor(/bin/false) = %v", err)
	}
}

// newServerArgs returns the source of each argument of the
// grpc.NewServer call in a Go file.
func newServerArgs(t *testing.T, fset *token.FileSet, f *ast.File) []string {
	t.Helper()
	var args []string
	found := 0
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "NewServer" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "grpc" {
			return true
		}
		found++
		for _, a := range call.Args {
			var b bytes.Buffer
			if err := format.Node(&b, fset, a); err != nil {
				t.Fatal(err)
			}
			args = append(args, b.String())
		}
		return false
	})
	if found != 1 {
		t.Fatalf("%s: %d calls of grpc.NewServer, want 1", fset.File(f.Pos()).Name(), found)
	}
	return args
}

// constValue returns the value of a package-level constant of the files,
// evaluated on its own.
func constValue(t *testing.T, fset *token.FileSet, files []*ast.File, name string) string {
	t.Helper()
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name != name || i >= len(vs.Values) {
						continue
					}
					var b bytes.Buffer
					if err := format.Node(&b, fset, vs.Values[i]); err != nil {
						t.Fatal(err)
					}
					tv, err := types.Eval(fset, nil, token.NoPos, b.String())
					if err != nil || tv.Value == nil {
						t.Fatalf("constant %s = %s: not a constant on its own (%v)", name, b.String(), err)
					}
					return tv.Value.ExactString()
				}
			}
		}
	}
	t.Fatalf("no constant %s", name)
	return ""
}

// parseDir parses the Go files of dir but its tests.
func parseDir(t *testing.T, fset *token.FileSet, dir string) map[string]*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = f
	}
	return files
}

// TestFloorOptionsMatchServe checks that the floor's server options are
// still ratekit serve's: the arguments of its grpc.NewServer call, read
// from the source of cmd/ratekit, are the floor's, with the flags'
// default values in place of the flags.
func TestFloorOptionsMatchServe(t *testing.T) {
	serveDir := filepath.Join("..", "..", "..", "cmd", "ratekit")
	if _, err := os.Stat(filepath.Join(serveDir, "serve.go")); errors.Is(err, os.ErrNotExist) {
		t.Skip("cmd/ratekit is not beside this module (outside the ratekit repository)")
	}
	fset := token.NewFileSet()
	serveFiles := parseDir(t, fset, serveDir)
	floorFiles := parseDir(t, fset, ".")
	if serveFiles["serve.go"] == nil || floorFiles["floor.go"] == nil {
		t.Fatal("serve.go or floor.go missing")
	}

	// The flags whose defaults the floor copies, and the constants that
	// hold those defaults on each side.
	flags := strings.NewReplacer("cfg.maxMsgBytes", "floorMaxMsgBytes", "cfg.maxStreams", "floorMaxStreams")
	var serveList, floorList []*ast.File
	for _, f := range serveFiles {
		serveList = append(serveList, f)
	}
	for _, f := range floorFiles {
		floorList = append(floorList, f)
	}
	for serveConst, floorConst := range map[string]string{
		"defaultMaxMsgBytes": "floorMaxMsgBytes",
		"defaultMaxStreams":  "floorMaxStreams",
	} {
		if s, f := constValue(t, fset, serveList, serveConst), constValue(t, fset, floorList, floorConst); s != f {
			t.Errorf("ratekit serve's %s is %s, the floor's %s %s: update floor.go", serveConst, s, floorConst, f)
		}
	}

	serveArgs := newServerArgs(t, fset, serveFiles["serve.go"])
	floorArgs := newServerArgs(t, fset, floorFiles["floor.go"])
	for i := range serveArgs {
		serveArgs[i] = flags.Replace(serveArgs[i])
	}
	if strings.Join(serveArgs, "\n") != strings.Join(floorArgs, "\n") {
		t.Errorf("server options differ: update floor.go\nratekit serve (flags as their defaults):\n\t%s\nfloor:\n\t%s",
			strings.Join(serveArgs, "\n\t"), strings.Join(floorArgs, "\n\t"))
	}
	if len(floorArgs) < 5 {
		t.Errorf("the floor has %d server options, want ratekit serve's 5 or more", len(floorArgs))
	}
}

func TestPrintLoadFloor(t *testing.T) {
	h := &harness{}
	ref := &kind{name: kindReference, label: kindLabel(kindReference)}
	rk := &kind{name: kindRatekit, label: kindLabel(kindRatekit)}
	fl := &kind{name: kindFloor, label: kindLabel(kindFloor)}
	h.kinds = []*kind{ref, rk}
	h.floor = fl
	h.o.count, h.o.duration, h.o.connections = 1, time.Second, 1
	configs := []loadConfig{{streams: 16, values: 1, key: "hi"}}
	run := func(rate, svc, redis, ghz float64) [][]loadRun {
		return [][]loadRun{{{rate: rate, p50: 1e6, p99: 2e6, cpu: [procCount]float64{svc, redis, ghz}, cpuOK: true, check: "OK"}}}
	}
	runs := map[string][][]loadRun{
		kindReference: run(1000, 100, 20, 80), // 200 µs in all: 2x takes 100
		kindRatekit:   run(1500, 50, 10, 60),  // budget 100 - 60 - 10 = 30
		kindFloor:     run(2500, 40, 0, 50),
	}
	var b strings.Builder
	h.printLoad(&b, h.loadKinds(), configs, runs)
	out := b.String()
	for _, want := range []string{
		"| 16 | 1 | 1e9/min (none over) | floor (grpc-go, no decision) | 2500 ±0% | 1.00 ±0% | 2.00 ±0% | 40.0 | none | 50.0 | 0 | OK |",
		// Ratios: ratekit 1.5x, 50+10 of 120 µs; the floor 2.5x, 40 of 120.
		"| 16 | 1 | 1e9/min (none over) | 1.50 | 1.00 | 1.00 | 0.50 | 2.50 | 1.00 | 1.00 | 0.33 | 2.50 |",
		"floor (grpc-go, no decision) decisions/s",
		// Above the floor: 50 - 40; for 2x: 30.
		"| 16 | 1 | 1e9/min (none over) | 40.0 | 50.0 | 10.0 | 30.0 |",
		"per call with no decision",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
