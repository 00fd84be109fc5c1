package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/rulesredis"
)

// ruleSet holds the engines of ratekit serve, one per domain, each loaded
// from one source: a config file, or a Redis key. It refuses a load that
// would give two sources the same domain, and tells the service which
// engines there are as a config directory gains and loses files.
type ruleSet struct {
	log       *slog.Logger
	hooks     *serveHooks
	interval  time.Duration // of the files' polling and the directory's scan
	newEngine func() (*rules.Engine, error)
	svc       *rls.Service // set once the first rules are loaded

	// mu guards sources and their domains; a source's load holds it, so
	// that two sources never take one domain.
	mu      sync.Mutex
	sources map[string]*source

	// Of the directory's scans (one goroutine, or the first scan).
	spare  map[string]*rules.Engine // engines of files removed or not loaded, by path, for reuse
	failed map[string]string        // the error last logged, by file that does not load

	stop chan struct{} // closed by close: ends the scans
	done chan struct{} // closed when the scans have ended
}

// A source is a file or Redis key and the engine it loads into.
type source struct {
	name   string // the file's path, or "redis:KEY"
	e      *rules.Engine
	domain string       // of the rules in force; guarded by ruleSet.mu
	close  func() error // stops its watcher
}

// target is the rulesfile.Target of one source.
type target struct {
	rs  *ruleSet
	src *source
}

// Load loads cfg into the source's engine, unless another source serves
// its domain.
func (t target) Load(cfg rules.Config) error {
	t.rs.mu.Lock()
	defer t.rs.mu.Unlock()
	for _, o := range t.rs.sources {
		if o != t.src && o.domain != "" && o.domain == cfg.Domain {
			return fmt.Errorf("%s: domain %q is served already, from %s: each domain must be in one file (or Redis key)", cfg.Source, cfg.Domain, o.name)
		}
	}
	if err := t.src.e.Load(cfg); err != nil {
		return err
	}
	t.src.domain = cfg.Domain
	return nil
}

func newRuleSet(log *slog.Logger, hooks *serveHooks, interval time.Duration, newEngine func() (*rules.Engine, error)) *ruleSet {
	return &ruleSet{
		log: log, hooks: hooks, interval: interval, newEngine: newEngine,
		sources: map[string]*source{}, spare: map[string]*rules.Engine{}, failed: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// engines returns the sources' engines, in the order of their names.
func (rs *ruleSet) engines() []*rules.Engine {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	names := make([]string, 0, len(rs.sources))
	for n := range rs.sources {
		names = append(names, n)
	}
	slices.Sort(names)
	es := make([]*rules.Engine, len(names))
	for i, n := range names {
		es[i] = rs.sources[n].e
	}
	return es
}

// domains returns the domains served, sorted, for the log.
func (rs *ruleSet) domains() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var ds []string
	for _, s := range rs.sources {
		ds = append(ds, s.domain)
	}
	slices.Sort(ds)
	return strings.Join(ds, ",")
}

// add loads a source into a new engine (or the spare one of its name)
// with watch, which starts the source's watcher on the target and
// returns its Close.
func (rs *ruleSet) add(name string, watch func(t rulesfile.Target) (func() error, error)) error {
	e := rs.spare[name]
	if e == nil {
		var err error
		if e, err = rs.newEngine(); err != nil {
			return err
		}
	}
	delete(rs.spare, name)
	src := &source{name: name, e: e}
	rs.mu.Lock()
	rs.sources[name] = src
	rs.mu.Unlock()
	closer, err := watch(target{rs, src})
	if err != nil {
		rs.mu.Lock()
		delete(rs.sources, name)
		rs.mu.Unlock()
		rs.spare[name] = e
		return err
	}
	src.close = closer
	return nil
}

// addFile loads a config file and watches it.
func (rs *ruleSet) addFile(path string) error {
	return rs.add(path, func(t rulesfile.Target) (func() error, error) {
		w, err := rulesfile.Watch(t, path, rulesfile.WithLogger(rs.log), rulesfile.WithPollInterval(rs.interval),
			rulesfile.WithReloadHook(func(err error) { rs.hooks.reloaded(path, err) }))
		if err != nil {
			return nil, err
		}
		return w.Close, nil
	})
}

// addKey loads the rules under a Redis key and watches them.
func (rs *ruleSet) addKey(rdb redis.UniversalClient, key string) error {
	name := "redis:" + key
	return rs.add(name, func(t rulesfile.Target) (func() error, error) {
		w, err := rulesredis.Watch(t, rdb, key, rulesredis.WithLogger(rs.log),
			rulesredis.WithReloadHook(func(err error) { rs.hooks.reloaded(name, err) }))
		if err != nil {
			return nil, err
		}
		return w.Close, nil
	})
}

// remove stops watching a source and retires its rules.
func (rs *ruleSet) remove(name string) (domain string) {
	rs.mu.Lock()
	src := rs.sources[name]
	rs.mu.Unlock()
	_ = src.close()
	rs.mu.Lock()
	delete(rs.sources, name)
	domain = src.domain
	rs.mu.Unlock()
	if domain != "" {
		// No rules, so that the metrics drop the series of its limits
		// (ratekitprom follows the engine for good).
		_ = src.e.Load(rules.Config{Domain: domain, Source: name})
	}
	rs.spare[name] = src.e
	return domain
}

// configFiles lists the config files of a directory: its *.yaml and *.yml
// files, not hidden (a Kubernetes ConfigMap volume's "..data" and the
// like), sorted.
func configFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, ent := range ents {
		n := ent.Name()
		ext := strings.ToLower(filepath.Ext(n))
		if strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		p := filepath.Join(dir, n)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue // a directory, or a broken symbolic link
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// loadDir loads every config file of dir: an error for a file that does
// not load (two with one domain included), or for a directory without
// any.
func (rs *ruleSet) loadDir(dir string) error {
	paths, err := configFiles(dir)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%s holds no config file (*.yaml or *.yml)", dir)
	}
	for _, p := range paths {
		if err := rs.addFile(p); err != nil {
			return err
		}
	}
	return nil
}

// scan brings the sources in line with dir's files: it stops watching
// the files removed and loads the files added; a file that does not load
// is logged, once per error, and tried again at the next scan. The
// service learns of any change.
func (rs *ruleSet) scan(dir string) {
	defer rs.hooks.scanned()
	paths, err := configFiles(dir)
	if err != nil {
		if rs.failed[dir] != err.Error() {
			rs.failed[dir] = err.Error()
			rs.log.Warn("ratekit serve: config directory unreadable; keeping the current rules", "path", dir, "error", err)
		}
		return
	}
	delete(rs.failed, dir)
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	rs.mu.Lock()
	var gone []string
	for n := range rs.sources {
		if !want[n] {
			gone = append(gone, n)
		}
	}
	rs.mu.Unlock()
	changed := false
	for _, n := range gone {
		d := rs.remove(n)
		rs.log.Info("ratekit serve: config file removed", "path", n, "domain", d)
		changed = true
	}
	for n := range rs.failed {
		if n != dir && !want[n] {
			delete(rs.failed, n)
		}
	}
	for _, p := range paths {
		rs.mu.Lock()
		_, have := rs.sources[p]
		rs.mu.Unlock()
		if have {
			continue
		}
		if err := rs.addFile(p); err != nil {
			if rs.failed[p] != err.Error() {
				rs.failed[p] = err.Error()
				rulesfile.LogRejected(rs.log, err, "path", p)
			}
			continue
		}
		delete(rs.failed, p)
		rs.mu.Lock()
		d := rs.sources[p].domain
		rs.mu.Unlock()
		rs.log.Info("ratekit serve: config file added", "path", p, "domain", d)
		changed = true
	}
	if changed {
		if err := rs.svc.SetEngines(rs.engines()); err != nil {
			// Not expected: the targets keep the domains apart.
			rs.log.Error("ratekit serve: the new set of config files was not applied", "error", err)
		}
	}
}

// watchDir scans dir every interval until close.
func (rs *ruleSet) watchDir(dir string) {
	go func() {
		defer close(rs.done)
		t := time.NewTicker(rs.interval)
		defer t.Stop()
		for {
			select {
			case <-rs.stop:
				return
			case <-t.C:
				rs.scan(dir)
			}
		}
	}()
}

// close stops the scans and the watchers.
func (rs *ruleSet) close(scanning bool) error {
	close(rs.stop)
	if scanning {
		<-rs.done
	}
	rs.mu.Lock()
	srcs := make([]*source, 0, len(rs.sources))
	for _, s := range rs.sources {
		srcs = append(srcs, s)
	}
	rs.mu.Unlock()
	var errs []error
	for _, s := range srcs {
		if s.close != nil {
			errs = append(errs, s.close())
		}
	}
	return errors.Join(errs...)
}
