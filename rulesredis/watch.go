package rulesredis

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ratekit/ratekit/internal/episode"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/redis/go-redis/v9"
)

// MaxSize is the largest document, in bytes, that Publish stores and
// Watch reads: 4 MiB. A larger value under the key is refused, and only
// its first MaxSize+1 bytes are ever transferred.
const MaxSize = 4 << 20

const (
	// defaultPollInterval is the polling period when no WithPollInterval
	// option is given.
	defaultPollInterval = 5 * time.Second
	// readTimeout bounds each read of the key.
	readTimeout = 5 * time.Second
)

var (
	// ErrNotFound reports that the key does not exist. Watch returns it,
	// wrapped, when the key is missing at start.
	ErrNotFound = errors.New("rulesredis: key not found")

	// ErrTooLarge reports a document larger than MaxSize, refused by
	// Publish and by Watch.
	ErrTooLarge = errors.New("rulesredis: rules document larger than 4 MiB")
)

// Channel returns the name of the Pub/Sub channel on which Publish
// announces a new version of the document under key, and to which Watch
// subscribes: the key followed by ":changed". A program that sets the key
// by other means can PUBLISH any message on it to have the watchers read
// the key at once, instead of at their next poll.
func Channel(key string) string { return key + ":changed" }

// source is the Config.Source of the document under key: it starts each
// error message.
func source(key string) string { return "redis:" + key }

// An Option configures Watch.
type Option func(*config)

type config struct {
	logger   *slog.Logger
	interval time.Duration
	hook     func(error)
	timeout  time.Duration // of each read

	// Test hook: called after every check of the key but the first.
	onCheck func()
}

// WithLogger sets the logger of the watcher's reload, rejection and
// outage messages. The default, and a nil logger, is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithPollInterval sets how often the watcher reads the key even when no
// message announces a change; the default is five seconds. Each poll
// transfers the document, so a large document and many servers call for a
// longer interval. A non-positive d keeps the default.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.interval = d
		}
	}
}

// WithReloadHook sets a function the watcher calls after every reload
// attempt, from its goroutine: with nil when a new document was applied,
// or with the error when it was not (the key is missing, the document is
// refused, or Redis cannot be reached). Like rulesfile.WithReloadHook, it
// is not called for the initial load, whose error Watch returns, nor for a
// document whose content is unchanged; a failure that persists (a key
// still missing, Redis still down) is reported once. It must not call the
// Watcher's Close.
func WithReloadHook(f func(err error)) Option {
	return func(c *config) { c.hook = f }
}

// A Watcher reloads the rules document under a Redis key into a Target
// when it changes. It is created by Watch and stopped by Close.
type Watcher struct {
	t    rulesfile.Target
	rdb  redis.UniversalClient
	key  string
	cfg  config
	log  *slog.Logger
	ps   *redis.PubSub
	msgs <-chan any // the subscription's messages, closed by go-redis after ps.Close

	ctx    context.Context // cancelled by Close, to abort a read
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	// State of the goroutine.
	sum     [32]byte // the hash of the document last loaded or refused
	haveSum bool     // whether sum is set
	failure string   // the missing-key or unreadable-document error last reported, to report it once
	down    bool     // Redis could not be reached at the last read
	outages episode.Log
}

// Watch reads the rules document under key, parses it with
// rulesfile.Parse (with source "redis:KEY", which starts its errors) and
// hands it to t, usually a *rules.Engine. If any of this fails (the key
// is missing, the document is invalid or larger than MaxSize, t refuses
// it, or Redis does not answer within five seconds), Watch returns the
// error and leaves nothing running.
//
// Then, until Close, it reloads the document into t whenever it changes:
// it subscribes to Channel(key), on which Publish announces each new
// version, and it also reads the key every poll interval (see
// WithPollInterval) and after every reconnection of its subscription. A
// document whose content is unchanged is not reloaded.
//
// A reload that fails leaves t's rules as they were. A refused document is
// logged with rulesfile.LogRejected ("ratekit: rules reload rejected;
// previous rules kept", one warning per error, with the key), once per
// version; a missing key is logged once ("ratekit: rules key missing;
// keeping the current rules"), and the document is loaded when the key is
// set again. When Redis cannot be reached the watcher logs
// "ratekit: rules source unreachable; keeping the current rules" once, and
// "ratekit: rules source reachable again" when a read succeeds. A
// successful reload logs "ratekit: rules reloaded" with the domain.
//
// rdb may be a client of one server, of a Sentinel group or of a Redis
// Cluster; the watcher uses it for its reads and one Pub/Sub connection,
// and never closes it.
func Watch(t rulesfile.Target, rdb redis.UniversalClient, key string, opts ...Option) (*Watcher, error) {
	switch {
	case t == nil:
		return nil, errors.New("rulesredis: Watch: nil Target")
	case rdb == nil:
		return nil, errors.New("rulesredis: Watch: nil Redis client")
	case key == "":
		return nil, errors.New("rulesredis: Watch: empty key")
	}
	w := &Watcher{
		t:    t,
		rdb:  rdb,
		key:  key,
		cfg:  config{interval: defaultPollInterval, timeout: readTimeout},
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for _, opt := range opts {
		opt(&w.cfg)
	}
	w.log = w.cfg.logger
	if w.log == nil {
		w.log = slog.Default()
	}

	// The first load, recording the hash of what was loaded.
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.timeout)
	data, err := read(ctx, rdb, key)
	cancel()
	if err != nil {
		return nil, err
	}
	cfg, err := rulesfile.Parse(source(key), data)
	if err != nil {
		return nil, err
	}
	if err := t.Load(cfg); err != nil {
		return nil, err
	}
	w.sum, w.haveSum = sha256.Sum256(data), true

	w.ctx, w.cancel = context.WithCancel(context.Background())
	// Subscribe does not fail: go-redis connects, and reconnects, in the
	// background. Each confirmation of the subscription, the first one
	// and those after a reconnection, comes as a *redis.Subscription and
	// makes the watcher read the key, for the messages it may have missed.
	w.ps = rdb.Subscribe(w.ctx, Channel(key))
	w.msgs = w.ps.ChannelWithSubscriptions()
	go w.run()
	return w, nil
}

// read returns the document under key: at most MaxSize bytes, read in
// one transaction with the key's existence and length, so that a larger
// value is never transferred whole.
func read(ctx context.Context, rdb redis.UniversalClient, key string) ([]byte, error) {
	var exists, size *redis.IntCmd
	var head *redis.StringCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, key)
		size = p.StrLen(ctx, key)
		head = p.GetRange(ctx, key, 0, MaxSize) // MaxSize+1 bytes at most
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("rulesredis: reading %q: %w", key, err)
	case exists.Val() == 0:
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	case len(head.Val()) > MaxSize:
		return nil, fmt.Errorf("%w: %q holds %d bytes", ErrTooLarge, key, size.Val())
	}
	return []byte(head.Val()), nil
}

// Close stops the watcher: it ends its subscription and waits for its
// goroutine, cancelling a read in progress. The reload hook is not called
// after Close returns. Close returns nil; calling it again does nothing.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		w.cancel()
		close(w.stop)
		<-w.done
		_ = w.ps.Close() // an error only if already closed
		// go-redis closes the channel once its reader sees the closed
		// connection; draining it lets the reader exit at once.
		for range w.msgs {
		}
	})
	return nil
}

// run is the watcher's goroutine.
func (w *Watcher) run() {
	defer close(w.done)
	ticker := time.NewTicker(w.cfg.interval)
	defer ticker.Stop()
	msgs := w.msgs
	for {
		select {
		case <-w.stop:
			return
		case _, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			// Messages that came together need one read.
		drain:
			for {
				select {
				case _, ok := <-msgs:
					if !ok {
						msgs = nil
						break drain
					}
				default:
					break drain
				}
			}
			w.check()
		case <-ticker.C:
			w.check()
		}
	}
}

// check reads the key and reloads the document if it changed.
func (w *Watcher) check() {
	if w.cfg.onCheck != nil {
		defer w.cfg.onCheck()
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.timeout)
	data, err := read(ctx, w.rdb, w.key)
	cancel()
	if w.ctx.Err() != nil {
		return // Close was called: the error, if any, is the cancellation
	}
	refused := errors.Is(err, ErrNotFound) || errors.Is(err, ErrTooLarge) || redis.HasErrorPrefix(err, "WRONGTYPE")
	if err != nil && !refused {
		w.unreachable(err)
		return
	}
	w.down = false
	if end, _ := w.outages.Recover(); end {
		w.log.Info("ratekit: rules source reachable again", "key", w.key)
	}
	if err != nil {
		w.fail(err)
		return
	}
	w.failure = ""
	sum := sha256.Sum256(data)
	if w.haveSum && sum == w.sum {
		return
	}
	w.sum, w.haveSum = sum, true

	cfg, err := rulesfile.Parse(source(w.key), data)
	if err == nil {
		err = w.t.Load(cfg)
	}
	if err != nil {
		rulesfile.LogRejected(w.log, err, "key", w.key)
	} else {
		w.log.Info("ratekit: rules reloaded", "key", w.key, "domain", cfg.Domain)
	}
	w.reloaded(err)
}

// fail reports a key that is missing or holds no readable document, once
// until the key is read again or the error changes. After it, the
// document is reloaded even if its content is as before.
func (w *Watcher) fail(err error) {
	if err.Error() == w.failure {
		return
	}
	w.failure = err.Error()
	w.haveSum = false
	if errors.Is(err, ErrNotFound) {
		w.log.Warn("ratekit: rules key missing; keeping the current rules", "key", w.key)
	} else {
		rulesfile.LogRejected(w.log, err, "key", w.key)
	}
	w.reloaded(err)
}

// unreachable reports an error reaching Redis, once per outage (and at
// most two log lines per 10 seconds when the outages come and go).
func (w *Watcher) unreachable(err error) {
	if start, _ := w.outages.Fail(); start {
		w.log.Warn("ratekit: rules source unreachable; keeping the current rules", "key", w.key, "error", err)
	}
	if w.down {
		return
	}
	w.down = true
	w.reloaded(err)
}

func (w *Watcher) reloaded(err error) {
	if w.cfg.hook != nil {
		w.cfg.hook(err)
	}
}
