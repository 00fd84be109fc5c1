package rulesfile

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/ratekit/ratekit/rules"
)

const (
	// defaultPollInterval is the polling period when no WithPollInterval
	// option is given.
	defaultPollInterval = time.Second
	// debounce is how long the watcher waits after the last file-system
	// event before reading the file, so that a save made of several
	// operations is read once, complete.
	debounce = 100 * time.Millisecond
	// maxDebounce bounds the wait after the first event, so that a file
	// that changes more often than debounce is still read.
	maxDebounce = 10 * debounce
	// racyWindow is how recent a modification time must be for polling
	// to distrust it: a file rewritten within the file system's clock
	// granularity keeps its modification time, so until its time is
	// older than this, every poll reads and hashes the file.
	racyWindow = 2 * time.Second
)

// A Target takes a config. *rules.Engine satisfies it: its Load validates
// and compiles the rules and swaps them in atomically, keeping the old
// rules when the new ones are invalid.
//
// A Watcher calls Load from its own goroutine, so a Target used elsewhere
// too must be safe for concurrent use.
type Target interface {
	Load(rules.Config) error
}

// Load reads and parses the rules file at path and hands the config to
// t, returning the first error: the file's, Parse's or t's. The config's
// Source is path.
func Load(t Target, path string) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	cfg, err := Parse(path, data)
	if err != nil {
		return err
	}
	return t.Load(cfg)
}

// An Option configures Watch.
type Option func(*config)

type config struct {
	logger   *slog.Logger
	interval time.Duration
	polling  bool
	hook     func(error)

	// Test hooks.
	newNotifier func() (*fsnotify.Watcher, error)
	onUnchanged func()
}

// WithLogger sets the logger of the watcher's reload, rejection and
// fallback messages. The default, and a nil logger, is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithPollInterval sets how often the watcher checks the file's size and
// modification time; the default is one second. The watcher polls even
// when it receives file-system notifications, as a safety net for the
// changes they miss (such as an edit to the target of a symbolic link in
// another directory). A non-positive d keeps the default.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.interval = d
		}
	}
}

// WithPolling makes the watcher rely on polling alone, without
// file-system notifications (fsnotify): for file systems that do not
// deliver them, such as some network and FUSE file systems.
func WithPolling() Option {
	return func(c *config) { c.polling = true }
}

// WithReloadHook sets a function the watcher calls after every reload
// attempt, from its goroutine: with nil when the new rules were applied,
// or with the error when they were not (the file is missing or
// unreadable, Parse rejected it, or the Target's Load did). It is not
// called for the initial load, whose error Watch returns, nor for a
// change that leaves the file's content as it was. It must not call the
// Watcher's Close.
func WithReloadHook(f func(err error)) Option {
	return func(c *config) { c.hook = f }
}

// A Watcher reloads a rules file into a Target when the file changes. It
// is created by Watch and stopped by Close.
type Watcher struct {
	t       Target
	path    string
	cfg     config
	log     *slog.Logger
	events  <-chan fsnotify.Event
	errs    <-chan error
	fsw     *fsnotify.Watcher
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	closeEr error

	// State of the goroutine.
	stamp   stamp    // the file's stamp when last read; zero to read on the next poll
	sum     [32]byte // the hash of the content last loaded or rejected
	haveSum bool     // whether sum is set
	failure string   // the last stat or read error reported, to report it once
}

// A stamp is what polling compares to decide whether to read the file.
type stamp struct {
	mod  int64 // modification time, in Unix nanoseconds
	size int64
}

func stampOf(fi fs.FileInfo) stamp {
	return stamp{fi.ModTime().UnixNano(), fi.Size()}
}

// Watch loads the rules file at path into t, as Load does, and then
// watches it, reloading it into t whenever its content changes, until
// Close. If the first load fails, Watch returns its error and leaves
// nothing running.
//
// Watch watches the file's directory, not the file, so that it sees a file
// replaced by renaming another over it (as editors save) and a symbolic
// link swapped to another target (as a Kubernetes ConfigMap volume
// updates); when path is a symbolic link, any change in the directory
// makes it re-read the file. After a change it waits until there have
// been no more for 100ms (but at most a second), then reads the file; a
// file whose content is unchanged is not reloaded. It also polls the
// file's size and modification time (see WithPollInterval); when
// file-system notifications are unavailable (for example, when the
// system's limit on watches is reached), it logs that once and relies on
// polling.
//
// A reload that fails leaves t's rules as they were: Watch logs it with
// LogRejected, one warning "ratekit: rules reload rejected; previous rules
// kept" per error with the path, once per version of the file, and calls
// the reload hook, if any, with the error. A successful reload logs
// "ratekit: rules reloaded". A file that is deleted is reported once and
// the current rules stay; when the file reappears, it is loaded.
func Watch(t Target, path string, opts ...Option) (*Watcher, error) {
	w := &Watcher{
		t:    t,
		path: path,
		cfg: config{
			interval:    defaultPollInterval,
			newNotifier: fsnotify.NewWatcher,
		},
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

	// The first load, recording the stamp and hash of what was loaded.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if err := t.Load(cfg); err != nil {
		return nil, err
	}
	w.sum, w.haveSum = sha256.Sum256(data), true
	w.setStamp(fi)

	if !w.cfg.polling {
		w.notify()
	}
	go w.run()
	return w, nil
}

// notify sets up file-system notifications for the file's directory, or
// logs why it cannot.
func (w *Watcher) notify() {
	fsw, err := w.cfg.newNotifier()
	if err == nil {
		err = fsw.Add(filepath.Dir(w.path))
		if err != nil {
			fsw.Close()
		}
	}
	if err != nil {
		w.log.Warn("ratekit: rules file notifications unavailable; polling",
			"path", w.path, "interval", w.cfg.interval, "error", err)
		return
	}
	w.fsw, w.events, w.errs = fsw, fsw.Events, fsw.Errors
}

// Close stops the watcher and waits for its goroutine to finish; the
// reload hook is not called after Close returns. Close returns the error,
// if any, of closing the file-system notifications; calling it again
// returns the same.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		if w.fsw != nil {
			w.closeEr = w.fsw.Close()
		}
	})
	return w.closeEr
}

// run is the watcher's goroutine.
func (w *Watcher) run() {
	defer close(w.done)
	ticker := time.NewTicker(w.cfg.interval)
	defer ticker.Stop()
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	var pending <-chan time.Time // timer.C while a change is pending
	var since time.Time          // when the pending change was first seen
	changed := func() {
		switch {
		case pending == nil:
			since = time.Now()
			pending = timer.C
			timer.Reset(debounce)
		case time.Since(since) < maxDebounce:
			timer.Reset(debounce)
		}
	}

	base := filepath.Base(w.path)
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.events:
			if !ok {
				w.events = nil
				continue
			}
			if filepath.Base(ev.Name) == base || w.isSymlink() {
				changed()
			}
		case err, ok := <-w.errs:
			if !ok {
				w.errs = nil
				continue
			}
			w.log.Warn("ratekit: rules file notification error", "path", w.path, "error", err)
			// Events may have been lost (fsnotify.ErrEventOverflow):
			// check the file.
			changed()
		case <-pending:
			pending = nil
			w.check(true)
		case <-ticker.C:
			w.check(false)
		}
	}
}

func (w *Watcher) isSymlink() bool {
	fi, err := os.Lstat(w.path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// setStamp records fi's stamp, or a zero stamp if fi's modification time
// is too recent to be trusted.
func (w *Watcher) setStamp(fi fs.FileInfo) {
	if time.Since(fi.ModTime()) < racyWindow {
		w.stamp = stamp{}
		return
	}
	w.stamp = stampOf(fi)
}

// check reloads the file if its content changed. Unless force is set, it
// first compares the file's stamp and reads the file only if that
// changed.
func (w *Watcher) check(force bool) {
	fi, err := os.Stat(w.path)
	if err != nil {
		w.fail(err)
		return
	}
	if !force && w.failure == "" && w.stamp != (stamp{}) && w.stamp == stampOf(fi) {
		return
	}
	data, err := readFile(w.path)
	if err != nil {
		w.fail(err)
		return
	}
	w.failure = ""
	w.setStamp(fi)
	sum := sha256.Sum256(data)
	if w.haveSum && sum == w.sum {
		if w.cfg.onUnchanged != nil {
			w.cfg.onUnchanged()
		}
		return
	}
	w.sum, w.haveSum = sum, true

	cfg, err := Parse(w.path, data)
	if err == nil {
		err = w.t.Load(cfg)
	}
	if err != nil {
		LogRejected(w.log, err, "path", w.path)
	} else {
		w.log.Info("ratekit: rules reloaded", "path", w.path, "domain", cfg.Domain)
	}
	w.reloaded(err)
}

// fail reports an error reading the file, once until the file is read
// again or the error changes. After it, the file is reloaded even if its
// content is as before.
func (w *Watcher) fail(err error) {
	if err.Error() == w.failure {
		return
	}
	w.failure = err.Error()
	w.haveSum = false
	if errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("ratekit: rules file missing; keeping the current rules", "path", w.path, "error", err)
	} else {
		LogRejected(w.log, err, "path", w.path)
	}
	w.reloaded(err)
}

func (w *Watcher) reloaded(err error) {
	if w.cfg.hook != nil {
		w.cfg.hook(err)
	}
}

// msgRejected is the message of the warnings LogRejected writes.
const msgRejected = "ratekit: rules reload rejected; previous rules kept"

// maxLogged caps the warnings LogRejected writes for one rejection.
const maxLogged = 100

// LogRejected logs a rejected reload on l (slog.Default() if nil): one
// warning "ratekit: rules reload rejected; previous rules kept" per error
// in err, each with args (slog key-value pairs that say where the rules
// came from, such as "path", path) and the error under "error". The
// errors of errors.Join, as Parse and rules.Engine.Load return them, are
// taken apart (nested joins too), so that each record holds one error on
// one line; any other error is logged whole. At most 100 records are
// written, and then one more with the number left out under "more". A nil
// err logs nothing.
//
// Watch logs its rejections with it, once per version of the file; other
// sources of rules (such as package rulesredis) use it too, so that every
// rejection reads alike.
func LogRejected(l *slog.Logger, err error, args ...any) {
	if l == nil {
		l = slog.Default()
	}
	errs := flatten(nil, err)
	for i, e := range errs {
		if i == maxLogged {
			l.Warn(msgRejected, append(args[:len(args):len(args)], "more", len(errs)-i)...)
			return
		}
		l.Warn(msgRejected, append(args[:len(args):len(args)], "error", e)...)
	}
}

// flatten appends to dst the errors err joins, recursively, or err
// itself. An error is taken apart only when it is exactly a join: its
// message is its errors' messages, one per line, as errors.Join makes
// them; an error that wraps several with a message of its own
// (fmt.Errorf with several %w) is kept whole, so that its message is not
// lost.
func flatten(dst []error, err error) []error {
	if err == nil {
		return dst
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return append(dst, err)
	}
	var msgs []string
	var errs []error
	for _, e := range j.Unwrap() {
		if e != nil {
			msgs = append(msgs, e.Error())
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 || strings.Join(msgs, "\n") != err.Error() {
		return append(dst, err)
	}
	for _, e := range errs {
		dst = flatten(dst, e)
	}
	return dst
}
