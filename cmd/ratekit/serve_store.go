package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/overlimit"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/hybrid"
)

// redisLog receives go-redis's own messages (a dial that failed, and the
// like), at level Debug: the stores log each outage once, as an episode,
// where go-redis would log every failed dial. go-redis has one logger
// per process, set once in init; it forwards to the logger of the
// latest server started.
var redisLog atomic.Pointer[slog.Logger]

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, fmt.Sprintf(format, v...))
	}
}

func init() { redis.SetLogger(redisLogger{}) }

// pingTimeout bounds the check that Redis answers at start.
const pingTimeout = 3 * time.Second

// stores are the store of ratekit serve's counts and its Redis clients.
type stores struct {
	store   core.Store
	rdb     *redis.Client // nil without -redis
	metrics []ratekitprom.Option
	closers []func() error // in order: the store, then the clients
}

// Close closes the store and then the Redis clients.
func (s *stores) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// openStores opens the store -store names, and the Redis client of
// -redis. Redis must answer at start unless the decisions fail open: then
// a warning says it does not, and the store waits for it.
func openStores(cfg *serveConfig, log *slog.Logger) (*stores, error) {
	s := &stores{metrics: []ratekitprom.Option{ratekitprom.WithStore(cfg.store)}}
	redisLog.Store(log)
	if cfg.redisAddr != "" {
		s.rdb = redis.NewClient(redisOptions(cfg.redisAddr, cfg.redisPassword))
		s.closers = append(s.closers, s.rdb.Close)
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		err := s.rdb.Ping(ctx).Err()
		cancel()
		switch {
		case err == nil:
		case len(cfg.rulesKeys) > 0:
			_ = s.Close()
			return nil, fmt.Errorf("redis at %s does not answer, and the rules (-rules-redis-key) are read from it at start: %w", cfg.redisAddr, err)
		case cfg.failClosed:
			_ = s.Close()
			return nil, fmt.Errorf("redis at %s does not answer: %w (-fail closed; with -fail open, ratekit serve starts and admits until Redis answers)", cfg.redisAddr, err)
		default:
			log.Warn("ratekit serve: redis does not answer; starting, and admitting while it does not (-fail open)", "redis", cfg.redisAddr, "error", err)
		}
	}
	switch cfg.store {
	case "memory":
		s.store = &core.MemoryStore{Logger: log}
	case "redis":
		rs, err := redisstore.New(s.rdb, redisstore.WithLogger(log))
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.store = rs
		if cfg.overLimitCache {
			c, err := overlimit.New(rs)
			if err != nil {
				_ = s.Close()
				return nil, err
			}
			s.store = c
		}
		s.metrics = append(s.metrics, ratekitprom.WithOutOfMemory(rs.OutOfMemory))
	case "hybrid":
		opts := []hybrid.Option{hybrid.WithLogger(log)}
		if cfg.region != "" {
			peers := map[string]redis.UniversalClient{}
			for name, addr := range cfg.peers {
				o := redisOptions(addr, cfg.redisPassword)
				// A slow link is not a partition: the store bounds each send.
				o.ReadTimeout = -1
				c := redis.NewClient(o)
				s.closers = append(s.closers, c.Close)
				peers[name] = c
			}
			opts = append(opts, hybrid.WithRegion(cfg.region, peers))
		}
		h, err := hybrid.New(s.rdb, cfg.hybridInterval, opts...)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.store = h
		// Closed first: its last sync needs the clients.
		s.closers = append([]func() error{h.Close}, s.closers...)
	}
	return s, nil
}
