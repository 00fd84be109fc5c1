package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The floor is a gRPC server that registers Envoy's RateLimitService with
// the server options of ratekit serve and decides nothing: every call is
// answered OK, with one constant status a descriptor. Its CPU per call is
// what grpc-go itself spends on a call; what a ratekit kind spends above
// it is its decision (and its Redis client). rlscompare runs it by
// starting its own binary again with floorAddrEnv set to the address to
// serve on, so that it needs no build of its own.

// floorAddrEnv, when set, makes the command serve the floor on that
// address instead of running the comparison.
const floorAddrEnv = "RLSCOMPARE_FLOOR_ADDR"

// The values of ratekit serve's -max-message-bytes and -max-streams by
// default (cmd/ratekit, serve_flags.go), copied rather than imported.
// TestFloorOptionsMatchServe checks they still match.
const (
	floorMaxMsgBytes = 1 << 20
	floorMaxStreams  = 1000
)

// floorLimit is the constant limit the floor reports: the load runs'
// "hi" limit, which no run reaches.
const floorLimit = 1_000_000_000

// floorStopGrace is how long stopping the floor waits after SIGTERM
// before SIGKILL.
const floorStopGrace = 5 * time.Second

// newFloorServer returns a gRPC server with the floor registered on it.
// Its options are those of ratekit serve (cmd/ratekit, serve.go), written
// the same way, with the flags' defaults in place of the flags.
func newFloorServer() *grpc.Server {
	gs := grpc.NewServer(
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.MaxRecvMsgSize(floorMaxMsgBytes),
		grpc.MaxConcurrentStreams(uint32(floorMaxStreams)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	)
	rlsv3.RegisterRateLimitServiceServer(gs, floorService{})
	return gs
}

// floorService answers every call OK without deciding anything.
type floorService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK, with one OK status a descriptor carrying a
// constant limit, remaining count and reset time, as a real service's
// answer under a limit nothing reaches does.
func (floorService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
				RequestsPerUnit: floorLimit,
				Unit:            rlsv3.RateLimitResponse_RateLimit_MINUTE,
			},
			LimitRemaining:     floorLimit - 1,
			DurationUntilReset: &durationpb.Duration{Seconds: 60},
		}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}

// serveFloor serves the floor on l until ctx is done.
func serveFloor(ctx context.Context, l net.Listener) error {
	gs := newFloorServer()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		gs.Stop()
		<-served
		return nil
	}
}

// runFloor is the command in floor mode: it serves the floor on addr
// until ctx is done.
func runFloor(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	return serveFloor(ctx, l)
}

// floorProc is the floor's process, started by startFloor.
type floorProc struct {
	addr    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once Wait has returned
	waitErr error         // read only after done is closed
}

// startFloor starts bin (this command's own binary) in floor mode on a
// free port of 127.0.0.1, with its output in dir/floor.log, and returns
// once it answers a call OK.
func startFloor(ctx context.Context, bin, dir string) (*floorProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &floorProc{addr: addr, logPath: filepath.Join(dir, "floor.log"), done: make(chan struct{})}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(floorBaseEnv(), floorAddrEnv+"="+addr)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = sysProcAttr()
	err = p.cmd.Start()
	_ = f.Close() // the child holds its own descriptor
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx); err != nil {
		_ = p.stop()
		log, _ := os.ReadFile(p.logPath)
		return nil, fmt.Errorf("floor: %w\n--- %s ---\n%s", err, p.logPath, strings.TrimSpace(string(log)))
	}
	return p, nil
}

// floorBaseEnv is the environment the floor starts with: the variables
// ratekit serve is given by the comparison (see rlsproc), no more.
func floorBaseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// waitReady waits until the floor accepts connections and answers a call
// OK, it exits, ctx ends or 30 seconds pass.
func (p *floorProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.probe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering (%v)", p.waitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probe checks that the floor accepts a connection, then calls it once.
// The call goes on a connection of its own once the port is open, so that
// gRPC's backoff after a refused connection does not delay the start.
func (p *floorProc) probe(ctx context.Context) error {
	c, err := net.DialTimeout("tcp", p.addr, time.Second)
	if err != nil {
		return err
	}
	_ = c.Close()
	conn, err := dial(p.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, loadRequest("hi", "ready"))
	if err != nil {
		return err
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("answered %s", resp.GetOverallCode())
	}
	return nil
}

// pid returns the floor's process ID.
func (p *floorProc) pid() int {
	return p.cmd.Process.Pid
}

// command returns the floor's command line for the report.
func (p *floorProc) command() string {
	return floorAddrEnv + "=" + p.addr + " " + filepath.Base(p.cmd.Path)
}

// stop ends the floor: SIGTERM, then SIGKILL after floorStopGrace. It
// waits for the process to be reaped; stopping it twice is not an error.
func (p *floorProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("floor (pid %d): %w", p.pid(), err)
	}
	t := time.NewTimer(floorStopGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("floor (pid %d): %w", p.pid(), err)
	}
	<-p.done
	return nil
}

// startFloorKind starts the floor as a kind of the load runs, from this
// command's own binary.
func (h *harness) startFloorKind(ctx context.Context) (*kind, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("floor: finding this command's binary: %w", err)
	}
	p, err := startFloor(ctx, bin, filepath.Join(h.dir, kindFloor, "logs"))
	if err != nil {
		return nil, err
	}
	k := &kind{name: kindFloor, label: kindLabel(kindFloor), bin: bin, floor: p}
	h.logf("started %s (pid %d): %s", k.label, p.pid(), p.command())
	if k.conn, err = dial(p.addr); err != nil {
		_ = p.stop()
		return nil, err
	}
	return k, nil
}
