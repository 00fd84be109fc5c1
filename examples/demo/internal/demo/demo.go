// Package demo is the demo of ratekit (examples/demo) less its router: the
// command line, the limiters, stores, queue, concurrency caps and paced
// client it builds from the flags, the routes' handlers, and the life of
// the server, from the first line it prints to its graceful shutdown.
//
// A program of the demo is a Program: the router and ratekit middleware
// that serve the Routes, and whether it serves -metrics. The default
// program (examples/demo) serves them with net/http's ServeMux and
// package stdhttp, which this package provides (StdHTTP), so that it
// builds no framework and no metrics library; each framework has a
// program of its own (examples/demo/gin, echo, echo5, fiber, fiber3, chi),
// built only when it is run, and examples/demo/metrics is the default
// program with Prometheus metrics. The limiters are built once, the same
// in every program, and so are the answers: status, rate-limit headers
// and problem-details body.
//
// This package imports no framework and no metrics library: a program
// brings its own (Program.Server, Program.Metrics).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/rulesredis"
)

// Program is one program of the demo: the router that serves the routes,
// and the metrics of -metrics.
type Program struct {
	// Framework is the value of -framework that the program serves:
	// stdhttp, gin, echo, echo5, fiber, fiber3 or chi.
	Framework string
	// Router names the router in what the demo prints, such as
	// "net/http" or "Gin".
	Router string
	// Server returns the server of the routes, made with the program's
	// router and ratekit middleware.
	Server func(*Routes) (Server, error)
	// Metrics makes the metrics of -metrics. Nil leaves the metrics
	// library out of the program, which then refuses -metrics with the
	// command of one that serves them.
	Metrics NewMetrics
	// MetricsByDefault is the default of -metrics.
	MetricsByDefault bool
}

// Server is what the demo needs of a program's server: *http.Server, or
// a framework's own server (Fiber's) adapted to these methods.
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Main runs the program p on the command line until SIGINT or SIGTERM,
// and exits: with status 0 after a graceful shutdown, 2 for an invalid
// flag, 1 for any other error, which it prints.
func Main(p Program) {
	// go-redis logs every failed dial (dozens of lines a minute while
	// Redis is down); ratekit logs the outage once per episode. Its lines
	// go to debug, below the demo's level, as docs/redis.md shows.
	redis.SetLogger(redisLog{slog.New(slog.NewTextHandler(os.Stderr, nil))})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, p, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode("demo", err, os.Stderr))
}

// redisLog is go-redis's logger, at debug level on a slog.Logger.
type redisLog struct{ log *slog.Logger }

// Printf logs one line of go-redis.
func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// Run parses args, serves the routes with p until ctx is done, and shuts
// the server down. It prints "listening on ADDR" to stdout once the
// listener is open, and all else to stderr.
func Run(ctx context.Context, p Program, args []string, stdout, stderr io.Writer) error {
	return Serve(ctx, p, args, stdout, stderr, Fakes{})
}

// Fakes stand in for the passing of time in tests; the zero value is the
// real thing.
type Fakes struct {
	// Clock is read by the stores, the memory queue and the limiter of
	// the demo's provider; nil is the system clock.
	Clock func() time.Time
	// Sleep is the clock that GET /upstream's client waits on, and
	// measures its waits with; nil is the system clock.
	Sleep client.Clock
	// Work is the work of a report (POST /reports): nil waits d, or
	// until ctx ends.
	Work func(ctx context.Context, d time.Duration) error
	// Timeouts are the servers' time limits on a connection; the zero
	// value is DefaultTimeouts. Short ones let a test watch a server
	// close idle and stalled connections.
	Timeouts Timeouts
}

// Timeouts are a server's time limits on a connection, as http.Server's
// fields of the same names: to read a request's header, to read the whole
// request, to write the answer (from the end of the request's header),
// and to wait for the next request of a kept-alive connection.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are the demo's: a body of POST /orders is at most 16
// KiB, and the slowest answers (POST /reports, GET /upstream) come within
// 5 s, so a connection that sends nothing, stalls in a request, or idles
// between requests is closed within 15 s.
var DefaultTimeouts = Timeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 15 * time.Second, Idle: 15 * time.Second}

// Server returns an http.Server of h with the timeouts t.
func (t Timeouts) Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}

// shutdownTimeout bounds how long requests in flight may take to finish
// after a signal.
const shutdownTimeout = 10 * time.Second

// Serve is Run with the fakes f.
func Serve(ctx context.Context, p Program, args []string, stdout, stderr io.Writer, f Fakes) error {
	clock := f.Clock
	cfg, err := parseFlags(p, args, stderr)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stderr, cfg.startLine(p)); err != nil {
		return err
	}
	var rdb redis.UniversalClient
	if cfg.store != "memory" {
		rdb = cfg.redisClient()
		defer rdb.Close()
	}
	peers := cfg.peerClients() // -region: the other regions' Redis
	defer func() {
		for _, p := range peers {
			_ = p.Close()
		}
	}()
	// Deferred after the clients' Close, stop runs before it: the hybrid
	// store's last sync sends what this server counted, to this region's
	// Redis and to the others'. It runs once the server has shut down.
	shared, stopStore, err := cfg.sharedStore(clock, rdb, peers)
	if err != nil {
		return err
	}
	defer stopStore()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	rt, err := cfg.routes(p.Metrics, clock, shared, log)
	if err != nil {
		return err
	}
	rt.Timeouts = f.Timeouts
	if rt.Timeouts == (Timeouts{}) {
		rt.Timeouts = DefaultTimeouts
	}
	if rt.Orders, err = cfg.orders(clock, shared, rdb, log); err != nil {
		return err
	}
	// The worker stops before the Redis client closes (defers run last
	// first); the order it was placing is delivered again.
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := rt.Orders.run(wctx)
	defer func() { stopWorker(); <-workerDone }()
	exact, err := cfg.exactStore(clock, shared, rdb)
	if err != nil {
		return err
	}
	if rt.Reports, err = cfg.reports(clock, shared, exact, f.Work, log); err != nil {
		return err
	}
	// The demo's provider, without -upstream, stops after the server
	// (defers run last first), once no request of GET /upstream is left.
	if rt.Upstream, err = cfg.upstream(ctx, clock, f.Sleep, exact, log); err != nil {
		return err
	}
	defer rt.Upstream.close()
	if rt.Rules != nil {
		if k := cfg.rulesRedis; k != nil {
			rrdb := k.client()
			defer rrdb.Close()
			w, err := rulesredis.Watch(rt.Rules, rrdb, k.key, rulesredis.WithLogger(log))
			if errors.Is(err, rulesredis.ErrNotFound) {
				return fmt.Errorf("%w (publish the rules first: go run github.com/ratekit/ratekit/rulesredis/cmd/ratekit-rules -redis redis://HOST:PORT/DB -key KEY FILE)", err)
			}
			if err != nil {
				return err // the document is invalid (its errors say where), or Redis is down
			}
			defer w.Close()
		} else {
			w, err := rulesfile.Watch(rt.Rules, cfg.rulesFile, rulesfile.WithLogger(log))
			if err != nil {
				return err // the file is missing or invalid: its errors say where
			}
			defer w.Close()
		}
	}
	srv, err := p.Server(rt)
	if err != nil {
		return err
	}
	if rdb != nil {
		// Not fatal: the limiter fails open (or closed, with -fail closed)
		// until Redis answers, and recovers by itself.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := rdb.Ping(pctx).Err(); err != nil {
			if cfg.store == "hybrid" {
				fmt.Fprintf(stderr, "demo: warning: Redis does not answer (%v); each server decides within its share of the limit until it does\n", err)
			} else {
				fmt.Fprintf(stderr, "demo: warning: Redis does not answer (%v); requests are decided by -fail %s until it does\n", err, cfg.fail)
			}
		}
		cancel()
	}
	for name, p := range peers {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := p.Ping(pctx).Err(); err != nil {
			fmt.Fprintf(stderr, "demo: warning: the Redis of region %s does not answer (%v); this region decides on the counts it has until it does\n", name, err)
		}
		cancel()
	}
	adm, err := listenAdmin(ctx, cfg, rt, log) // nil without -admin
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.addr)
	if err != nil {
		adm.stop()
		return err
	}
	defer ln.Close() // closing it again after the server did is harmless
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	err = adm.serve(cfg, stderr)
	if err == nil {
		_, err = fmt.Fprintln(stderr, tryLine(ln.Addr(), rt.Metrics != nil))
	}
	if err == nil {
		_, err = fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	}
	if err != nil {
		_ = srv.Close()
		_ = ln.Close()
		<-served
		adm.stop()
		return err
	}

	select {
	case err := <-served: // the listener failed
		adm.stop()
		return err
	case <-adm.done(): // the admin listener failed
		_ = srv.Close()
		_ = ln.Close()
		<-served
		return adm.failure()
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	// Fiber's Shutdown does nothing if it comes before Listener has taken
	// the listener; closing the listener after Shutdown ends Listener then.
	_ = ln.Close()
	<-served // http.ErrServerClosed, or nil from Fiber
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("shutdown: %w", err)
	}
	return errors.Join(err, adm.shutdown(sctx))
}

// HTTPServer adapts the handler of a router that serves net/http to
// Program.Server.
func HTTPServer(handler func(*Routes) (http.Handler, error)) func(*Routes) (Server, error) {
	return func(rt *Routes) (Server, error) {
		h, err := handler(rt)
		if err != nil {
			return nil, err
		}
		return rt.Timeouts.Server(h), nil
	}
}
