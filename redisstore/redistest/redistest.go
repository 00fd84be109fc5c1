// Package redistest runs real, private redis-server processes for tests:
// one server per call to Start, or a small Redis Cluster with
// StartCluster. Every process listens on its own free port on 127.0.0.1,
// keeps nothing on disk, lives in a directory of the test's own and is
// killed, by its process ID, when the test ends. Nothing here ever
// connects to a Redis the package did not start, so a shared Redis on the
// same machine (such as one on port 6379) is never touched.
//
// The servers can be crashed and restarted (Stop, Restart) and made to
// hang (Pause, Resume), to test how a client behaves when Redis fails.
//
// redis-server must be on PATH. Without it the tests that need it are
// skipped, unless the environment variable CI is set, in which case they
// fail.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds the wait for a new process to answer.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a killed process to be reaped.
	stopTimeout = 10 * time.Second
	// rebindTimeout bounds how long Restart retries a port that is
	// briefly unavailable.
	rebindTimeout = 10 * time.Second
	// startAttempts is how many free ports Start tries before giving up.
	startAttempts = 5
	// pollInterval is the pause between two readiness probes.
	pollInterval = 10 * time.Millisecond
)

// installHint tells the reader how to get redis-server.
const installHint = "redistest: redis-server not found on PATH; install it (apt-get install redis-server)"

// errPortInUse marks a start that failed because the port (or the cluster
// bus port) was already bound by another process.
var errPortInUse = errors.New("port already in use")

// Server is one redis-server process started for a test by Start or
// StartCluster. Its port never changes, across Restart too. All methods
// are safe for concurrent use.
type Server struct {
	bin     string   // path of redis-server
	dir     string   // working directory, also --dir
	port    int      // fixed at start
	busPort int      // cluster bus port, 0 if not a cluster node
	args    []string // full command line after the program name

	mu       sync.Mutex
	proc     *process // the running process, nil once stopped
	paused   bool     // proc is stopped with SIGSTOP
	launches int      // numbers the log files
}

// process is one redis-server process of a Server.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once cmd.Wait has returned
	waitErr error         // cmd.Wait's result; read only after done
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago: it
// listens on port 0, reads the port the kernel chose and closes the
// listener. Another process may take the port before the caller binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatalf("redistest: finding a free port: %v", err)
	}
	return port
}

// Start starts a redis-server for the test and returns once it answers
// commands. The server listens on 127.0.0.1 only, on a free port, without
// protected mode, RDB snapshots or an append-only file, and runs in a
// directory from t.TempDir that also holds its log. args are appended to
// the command line, for example "--maxmemory", "1mb". When the chosen port
// turns out to be taken, Start retries on another port a few times.
//
// The server is killed, and its exit waited for, by a t.Cleanup function.
// If the server cannot be started the test fails with the end of the
// server's log. If redis-server is not on PATH the test is skipped, or
// fails if the environment variable CI is not empty.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookRedisServer(t)
	return start(t, bin, func() (int, int, []string) {
		return FreePort(t), 0, args
	})
}

// lookRedisServer returns the path of redis-server, or skips or fails the
// test if there is none.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(installHint)
		}
		t.Skip(installHint)
	}
	return bin
}

// start starts a server and registers its cleanup. pick is called for
// every attempt and returns the port, the cluster bus port (0 if none) and
// the arguments to append to the command line.
func start(t testing.TB, bin string, pick func() (port, busPort int, extra []string)) *Server {
	t.Helper()
	s := &Server{bin: bin, dir: t.TempDir()}
	// Registered after t.TempDir, so it runs before the directory is
	// removed.
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		port, busPort, extra := pick()
		args := []string{
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--protected-mode", "no",
			"--save", "",
			"--appendonly", "no",
			"--dir", s.dir,
		}
		args = append(args, extra...)
		p, err := s.launch(port, args)
		if err == nil {
			s.port, s.busPort, s.args, s.proc = port, busPort, args, p
			return s
		}
		errs = append(errs, fmt.Errorf("attempt %d on port %d: %w", attempt, port, err))
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	t.Fatalf("redistest: starting redis-server failed:\n%v", errors.Join(errs...))
	return nil
}

// launch starts a process with the given arguments and waits until it
// answers INFO with its own process ID. On failure the process is gone
// when launch returns. Callers hold s.mu.
func (s *Server) launch(port int, args []string) (*process, error) {
	s.launches++
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.launches))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	// The child has its own copy of the descriptor.
	_ = logFile.Close()
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	// The only call to Wait for this process.
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()

	if err := p.waitReady(port); err != nil {
		if kerr := p.kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return nil, err
	}
	return p, nil
}

// waitReady polls the port until the process answers, and fails early if
// the process exits. It checks the process ID INFO reports, so that a
// different server holding the port is not taken for ours.
func (p *process) waitReady(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	want := strconv.Itoa(p.cmd.Process.Pid)
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.done:
			err := fmt.Errorf("redis-server exited before answering (%v)", p.waitErr)
			if strings.Contains(p.logTail(), "Address already in use") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return fmt.Errorf("%w; log %s:\n%s", err, p.logPath, p.logTail())
		default:
		}
		pid, err := probePID(addr, p.done)
		if err == nil && pid == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %s) did not answer on %s within %v (last probe: pid %q, %v); log %s:\n%s",
				want, addr, readyTimeout, pid, err, p.logPath, p.logTail())
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// probePID sends INFO server to addr over a new connection and returns the
// process_id the server reports. It speaks RESP directly, rather than
// through go-redis, so that the refused connections of a server still
// starting do not fill the test log with go-redis's dial errors. When
// abort is closed (our process exited) the probe gives up at once, rather
// than wait for an answer from whatever else holds the port.
func probePID(addr string, abort <-chan struct{}) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return "", err
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-abort:
		case <-finished:
		}
		_ = conn.Close()
	}()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	header, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	header = strings.TrimRight(header, "\r\n")
	if !strings.HasPrefix(header, "$") {
		// An error such as -LOADING, or not Redis at all.
		return "", fmt.Errorf("unexpected reply to INFO: %q", header)
	}
	n, err := strconv.Atoi(header[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("unexpected reply to INFO: %q", header)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return infoField(string(body), "process_id"), nil
}

// kill sends SIGKILL (a no-op if the process has already exited) and waits,
// bounded, for the Wait goroutine to reap the process.
func (p *process) kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing redis-server pid %d: %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redis-server pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, stopTimeout)
	}
}

// logTail returns the last lines of the process's log.
func (p *process) logTail() string {
	const maxBytes, maxLines = 4096, 30
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// infoField returns the value of field in the text of INFO or CLUSTER
// INFO ("field:value" lines), or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Addr returns the server's address, "127.0.0.1:PORT". It stays the same
// after Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the TCP port the server listens on. It stays the same
// after Restart.
func (s *Server) Port() int {
	return s.port
}

// PID returns the process ID of the running redis-server, or 0 after Stop
// (until Restart). Restart changes it.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a new go-redis client for the server, with default
// options and a connection pool of its own, closed by t.Cleanup. It keeps
// working across Restart, once its broken connections have been dropped.
// With go-redis's default options a command sent while the server is
// stopped fails only after the client's dial retries, in the order of
// seconds; bound it with a context or the caller's own timeout.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Stop kills the server with SIGKILL, as a crash would, and waits for the
// process to exit. A paused server is resumed first. Clients' connections
// break and new connections are refused until Restart. Calling Stop on a
// stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// stop is Stop for the cleanup function, which must not call t.Fatal.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// stopLocked kills and reaps the running process, if any. Callers hold
// s.mu.
func (s *Server) stopLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	var errs []error
	if s.paused {
		if err := p.cmd.Process.Signal(sigCont); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("resuming redis-server pid %d: %w", p.cmd.Process.Pid, err))
		}
	}
	if err := p.kill(); err != nil {
		// Keep s.proc, so that a later call can try again.
		return errors.Join(append(errs, err)...)
	}
	s.proc, s.paused = nil, false
	return errors.Join(errs...)
}

// Restart stops the server if it is running, then starts a new
// redis-server on the same port, with the same arguments and directory,
// and waits until it answers. If the port cannot be bound at once (a
// connection to the old process may still hold it) Restart retries for a
// few seconds. The new process starts with no data and an empty script
// cache; a cluster node keeps its node ID and cluster configuration
// (nodes.conf).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
	deadline := time.Now().Add(rebindTimeout)
	for {
		p, err := s.launch(s.port, s.args)
		if err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restarting redis-server on port %d failed: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pause stops the process with SIGSTOP. The kernel still accepts TCP
// connections to the port (up to the listen backlog) and buffers what
// clients send, but the server answers nothing until Resume: Redis looks
// hung. Pausing a paused server does nothing; pausing a stopped one fails
// the test.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, sigStop, true)
}

// Resume continues a process paused by Pause with SIGCONT; the server then
// answers the commands that were waiting. Resuming a server that is not
// paused does nothing; resuming a stopped one fails the test.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, sigCont, false)
}

// signal sends sig to the running process and records whether it is now
// paused.
func (s *Server) signal(t testing.TB, sig os.Signal, paused bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig == nil {
		t.Fatal("redistest: Pause and Resume are not supported on this platform")
	}
	if s.proc == nil {
		t.Fatalf("redistest: redis-server on port %d is not running", s.port)
	}
	if s.paused == paused {
		return
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: sending %v to redis-server pid %d: %v", sig, s.proc.cmd.Process.Pid, err)
	}
	s.paused = paused
}
