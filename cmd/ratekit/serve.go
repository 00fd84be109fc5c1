package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/ratekit/ratekit/core"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
)

// serveHooks let a test follow a server that runs in its process; a
// real run has none.
type serveHooks struct {
	ready    func(grpcAddr, httpAddr string) // serving
	reloaded func(source string, err error)  // after each reload of a file or Redis key
	scanned  func()                          // after each scan of the config directory
}

type hooksKey struct{}

// hooksFrom returns the hooks ctx carries, with no-ops for those missing.
func hooksFrom(ctx context.Context) *serveHooks {
	h, _ := ctx.Value(hooksKey{}).(*serveHooks)
	c := serveHooks{ready: func(string, string) {}, reloaded: func(string, error) {}, scanned: func() {}}
	if h != nil {
		if h.ready != nil {
			c.ready = h.ready
		}
		if h.reloaded != nil {
			c.reloaded = h.reloaded
		}
		if h.scanned != nil {
			c.scanned = h.scanned
		}
	}
	return &c
}

// HTTP server timeouts.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 15 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
)

// runServe runs ratekit serve until ctx is done.
func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseServe(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.logLevel, cfg.logJSON)
	if err := serve(ctx, cfg, log, hooksFrom(ctx)); err != nil {
		return err
	}
	log.Info("ratekit serve: stopped")
	return nil
}

// serve loads the rules, serves gRPC and HTTP until ctx is done, then
// shuts down gracefully.
func serve(ctx context.Context, cfg *serveConfig, log *slog.Logger, hooks *serveHooks) error {
	st, err := openStores(cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()

	metrics, err := ratekitprom.New(st.metrics...)
	if err != nil {
		return err
	}
	limOpts := []core.Option{core.WithObserver(metrics.Observe), core.WithLogger(log)}
	if cfg.failClosed {
		limOpts = append(limOpts, core.WithFailClosed())
	}
	newEngine := func() (*rules.Engine, error) {
		e, err := rules.NewEngine(rules.WithStore(st.store), rules.WithAnyKey(), rules.WithLimiterOptions(limOpts...))
		if err != nil {
			return nil, err
		}
		if err := metrics.TrackRules(e); err != nil {
			return nil, err
		}
		return e, nil
	}

	rs := newRuleSet(log, hooks, cfg.watchInterval, newEngine)
	scanning := false
	defer func() { _ = rs.close(scanning) }()
	dir := ""
	if len(cfg.rulesKeys) > 0 {
		for _, k := range cfg.rulesKeys {
			if err := rs.addKey(st.rdb, k); err != nil {
				return fmt.Errorf("-rules-redis-key %s: %w", k, err)
			}
		}
	} else {
		fi, err := os.Stat(cfg.config)
		if err != nil {
			return fmt.Errorf("-config: %w", err)
		}
		if fi.IsDir() {
			dir = cfg.config
			err = rs.loadDir(dir)
		} else {
			err = rs.addFile(cfg.config)
		}
		if err != nil {
			return fmt.Errorf("-config: %w", err)
		}
	}

	svcOpts := []rls.Option{rls.WithLogger(log)}
	if cfg.shadow {
		svcOpts = append(svcOpts, rls.WithShadow())
	}
	if cfg.respHeaders {
		svcOpts = append(svcOpts, rls.WithResponseHeaders("", "", ""))
	}
	if cfg.limitOverrides {
		svcOpts = append(svcOpts, rls.WithLimitOverrides(st.store, limOpts...))
	}
	svc, err := rls.New(rs.engines(), svcOpts...)
	if err != nil {
		return err
	}
	rs.svc = svc
	if dir != "" {
		rs.watchDir(dir)
		scanning = true
	}

	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}

	gl, err := net.Listen("tcp", cfg.grpcAddr)
	if err != nil {
		return fmt.Errorf("-grpc: %w", err)
	}
	hl, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		gl.Close()
		return fmt.Errorf("-http: %w", err)
	}

	gs := grpc.NewServer(
		// A pool of stream workers, one per core, instead of a goroutine
		// per call: less scheduling per decision.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.MaxRecvMsgSize(cfg.maxMsgBytes),
		grpc.MaxConcurrentStreams(uint32(cfg.maxStreams)),
		// Envoy may ping idle connections; more often than every 5s is abuse.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Find dead clients: ping a connection idle for a minute.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	)
	svc.Register(gs)
	health := newHealthService()
	healthpb.RegisterHealthServer(gs, health)
	reflection.Register(gs)

	var serving atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !serving.Load() {
			http.Error(w, "not serving", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: errLog, MaxRequestsInFlight: 8, Timeout: 10 * time.Second}))
	mux.Handle("POST /json", svc.JSON())
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          errLog,
	}

	errc := make(chan error, 2)
	go func() {
		if err := gs.Serve(gl); err != nil {
			errc <- fmt.Errorf("grpc: %w", err)
			return
		}
		errc <- nil
	}()
	go func() {
		if err := hs.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
			return
		}
		errc <- nil
	}()
	health.serve()
	serving.Store(true)
	log.Info("ratekit serve: rules loaded", "domains", rs.domains(), "store", cfg.store)
	log.Info("ratekit serve: listening", "grpc", gl.Addr().String(), "http", hl.Addr().String())
	hooks.ready(gl.Addr().String(), hl.Addr().String())

	var failed error
	pending := 2
	select {
	case <-ctx.Done():
	case failed = <-errc:
		pending--
	}
	log.Info("ratekit serve: shutting down", "timeout", cfg.shutdown)
	serving.Store(false)
	health.stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		stopped := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(stopped)
		}()
		t := time.NewTimer(cfg.shutdown)
		defer t.Stop()
		select {
		case <-stopped:
		case <-t.C:
			log.Warn("ratekit serve: gRPC calls still in flight at the shutdown timeout; closing their connections", "timeout", cfg.shutdown)
			gs.Stop()
			<-stopped
		}
	})
	wg.Go(func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdown)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			log.Warn("ratekit serve: HTTP requests still in flight at the shutdown timeout; closing their connections", "timeout", cfg.shutdown)
			_ = hs.Close()
		}
	})
	wg.Wait()
	for ; pending > 0; pending-- {
		if err := <-errc; failed == nil {
			failed = err
		}
	}
	return failed
}
