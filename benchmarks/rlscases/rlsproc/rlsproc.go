// Package rlsproc starts the processes a comparison of rate limit
// services needs, each on free ports of 127.0.0.1 and each stopped by its
// process ID: a private redis-server (StartRedis), the reference service
// envoyproxy/ratelimit (StartReference) and ratekit serve (StartRatekit).
//
// Every process writes its output to a log file in a directory the caller
// gives; a start that fails returns an error with the end of that log.
// Nothing here connects to a Redis it did not start. On Linux a process
// started here is killed when the process that started it dies.
package rlsproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Timeouts of starting and stopping.
const (
	// ReadyTimeout bounds the wait for a new process to answer.
	ReadyTimeout = 30 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 20 * time.Millisecond
	// logTail is how many bytes of a log an error shows.
	logTail = 2000
)

// Proc is a process started by this package.
type Proc struct {
	// Name names the process in errors and log file names.
	Name string
	// LogPath is the file that holds the process's standard output and
	// error.
	LogPath string

	cmd     *exec.Cmd
	done    chan struct{} // closed once Wait has returned
	waitErr error         // read only after done is closed
}

// start starts cmd with its output going to dir/name.log.
func start(name, dir string, cmd *exec.Cmd) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	// The child holds its own descriptor.
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Proc) Pid() int {
	return p.cmd.Process.Pid
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL if it has not ended after
// a few seconds. It waits for the process to be reaped. Stopping a process
// that has ended already is not an error.
func (p *Proc) Stop() error {
	if p == nil || p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s (pid %d): %w", p.Name, p.Pid(), err)
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s (pid %d): %w", p.Name, p.Pid(), err)
	}
	<-p.done
	return nil
}

// Tail returns the end of the process's log.
func (p *Proc) Tail() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	return string(bytes.TrimSpace(b))
}

// failed returns an error about the process with the end of its log, and
// stops it.
func (p *Proc) failed(err error) error {
	_ = p.Stop()
	return fmt.Errorf("%s: %w\n--- end of %s ---\n%s", p.Name, err, p.LogPath, p.Tail())
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	// Holding the listeners until all are chosen keeps the ports
	// distinct.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// waitFor calls probe every pollInterval until it returns nil, the
// process ends, ctx ends or ReadyTimeout passes.
func (p *Proc) waitFor(ctx context.Context, what string, probe func() error) error {
	deadline := time.Now().Add(ReadyTimeout)
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("exited before %s (%v)", what, p.waitErr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not %s after %s: %w", what, ReadyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// Redis is a redis-server started by StartRedis.
type Redis struct {
	*Proc
	// Addr is host:port of the server.
	Addr string
}

// StartRedis starts redis-server on a free port of 127.0.0.1, without
// persistence, with its files in dir, and returns once it answers PING.
// args are added to the command line.
func StartRedis(ctx context.Context, dir string, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	full := append([]string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
	}, args...)
	name := "redis-" + strconv.Itoa(port)
	p, err := start(name, dir, exec.Command(bin, full...))
	if err != nil {
		return nil, err
	}
	r := &Redis{Proc: p, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := p.waitFor(ctx, "answering PING", func() error { return ping(r.Addr) }); err != nil {
		return nil, p.failed(err)
	}
	return r, nil
}

// ping sends PING to a Redis server and checks the reply.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(buf[:n], []byte("+PONG")) {
		return fmt.Errorf("PING answered %q", buf[:n])
	}
	return nil
}

// Service is a rate limit service started by StartReference or
// StartRatekit.
type Service struct {
	*Proc
	// GRPCAddr and HTTPAddr are host:port of the gRPC and the HTTP
	// listener.
	GRPCAddr, HTTPAddr string
	// ConfigDir is the directory the service reads its configuration
	// from.
	ConfigDir string
}

// baseEnv is the environment a service starts with: only the variables a
// program needs to run, so that settings of the caller's environment do
// not reach the service.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// ReferenceOptions configures StartReference.
type ReferenceOptions struct {
	// Bin is the path of the reference's service_cmd.
	Bin string
	// Name names the instance (logs, errors); default "reference".
	Name string
	// Root is the runtime root (RUNTIME_ROOT): the configuration is read
	// from ReferenceConfigDir(Root). Instances may share a root.
	Root string
	// LogDir receives the log; default Root.
	LogDir string
	// RedisAddr is host:port of the Redis to use.
	RedisAddr string
	// Stats selects the reference's stats sink: StatsPrometheus (the
	// default), StatsNone or StatsLog.
	Stats string
	// Env holds more settings, KEY=VALUE, applied last: for example
	// REDIS_PIPELINE_WINDOW=150us or LOCAL_CACHE_SIZE_IN_BYTES=1048576.
	Env []string
}

// The reference's stats sinks (ReferenceOptions.Stats). With statsd off
// and no other sink chosen, the reference writes every timing to its log
// (StatsLog), one line a request.
const (
	// StatsPrometheus serves the stats on /metrics of a port of its
	// own (USE_PROMETHEUS=true), as ratekit serve does.
	StatsPrometheus = "prometheus"
	// StatsNone drops the stats (DISABLE_STATS=true).
	StatsNone = "none"
	// StatsLog writes them to the log (statsd off, nothing else set).
	StatsLog = "log"
)

// ReferenceConfigDir returns the directory the reference reads its
// configuration from, given its runtime root, with
// RUNTIME_SUBDIRECTORY=ratelimit.
func ReferenceConfigDir(root string) string {
	return filepath.Join(root, "ratelimit", "config")
}

// StartReference starts envoyproxy/ratelimit's service_cmd with Redis
// storage, statsd off (stats as o.Stats says), the configuration in ReferenceConfigDir(o.Root)
// (which must exist) watched without a symlink swap
// (RUNTIME_WATCH_ROOT=false), and its gRPC, HTTP and debug listeners on
// free ports of 127.0.0.1. It returns once /healthcheck answers 200 and
// the gRPC port accepts connections.
func StartReference(ctx context.Context, o ReferenceOptions) (*Service, error) {
	if o.Name == "" {
		o.Name = "reference"
	}
	if o.LogDir == "" {
		o.LogDir = o.Root
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	var stats []string
	switch o.Stats {
	case "", StatsPrometheus:
		stats = []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(ports[3])}
	case StatsNone:
		stats = []string{"DISABLE_STATS=true"}
	case StatsLog:
	default:
		return nil, fmt.Errorf("unknown stats sink %q (want %s, %s or %s)", o.Stats, StatsPrometheus, StatsNone, StatsLog)
	}
	env := append(baseEnv(),
		"USE_STATSD=false",
		"BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+o.RedisAddr,
		"RUNTIME_ROOT="+o.Root,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1",
		"PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT="+strconv.Itoa(ports[2]),
		"LOG_LEVEL=warn",
	)
	env = append(env, stats...)
	env = append(env, o.Env...)
	cmd := exec.Command(o.Bin)
	cmd.Env = env
	cmd.Dir = o.Root
	p, err := start(o.Name, o.LogDir, cmd)
	if err != nil {
		return nil, err
	}
	s := &Service{
		Proc:      p,
		HTTPAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		GRPCAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ConfigDir: ReferenceConfigDir(o.Root),
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, p.failed(err)
	}
	return s, nil
}

// RatekitOptions configures StartRatekit.
type RatekitOptions struct {
	// Bin is the path of the ratekit command.
	Bin string
	// Name names the instance (logs, errors); default "ratekit".
	Name string
	// ConfigDir is the directory of *.yaml given to -config.
	ConfigDir string
	// LogDir receives the log.
	LogDir string
	// RedisAddr is host:port of the Redis to use (-redis).
	RedisAddr string
	// Store is the kind of store (-store): "redis" (the default) or
	// "hybrid", both on RedisAddr.
	Store string
	// Args holds more flags of ratekit serve.
	Args []string
}

// StartRatekit starts "ratekit serve" with the store of o.Store on the
// Redis of o.RedisAddr, the configuration in o.ConfigDir and its gRPC and
// HTTP listeners on free ports of 127.0.0.1. It returns once /healthcheck
// answers 200 and the gRPC port accepts connections.
func StartRatekit(ctx context.Context, o RatekitOptions) (*Service, error) {
	if o.Name == "" {
		o.Name = "ratekit"
	}
	switch o.Store {
	case "":
		o.Store = "redis"
	case "redis", "hybrid":
	default:
		return nil, fmt.Errorf("unknown store %q (want redis or hybrid)", o.Store)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Service{
		HTTPAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		GRPCAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ConfigDir: o.ConfigDir,
	}
	args := append([]string{"serve",
		"-config", o.ConfigDir,
		"-grpc", s.GRPCAddr,
		"-http", s.HTTPAddr,
		"-store", o.Store,
		"-redis", o.RedisAddr,
	}, o.Args...)
	cmd := exec.Command(o.Bin, args...)
	cmd.Env = baseEnv()
	cmd.Dir = o.LogDir
	p, err := start(o.Name, o.LogDir, cmd)
	if err != nil {
		return nil, err
	}
	s.Proc = p
	if err := s.waitReady(ctx); err != nil {
		return nil, p.failed(err)
	}
	return s, nil
}

// waitReady waits until /healthcheck answers 200 and the gRPC port
// accepts connections.
func (s *Service) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + s.HTTPAddr + "/healthcheck"
	return s.waitFor(ctx, "ready", func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthcheck: %s", resp.Status)
		}
		c, err := net.DialTimeout("tcp", s.GRPCAddr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// Command returns the command line and the settings a service was
// started with, for a report: the environment variables it was given
// besides the base ones, and its arguments.
func (p *Proc) Command() string {
	var parts []string
	base := map[string]bool{}
	for _, kv := range baseEnv() {
		base[kv] = true
	}
	for _, kv := range p.cmd.Env {
		if !base[kv] {
			parts = append(parts, kv)
		}
	}
	parts = append(parts, filepath.Base(p.cmd.Path))
	parts = append(parts, p.cmd.Args[1:]...)
	return strings.Join(parts, " ")
}
