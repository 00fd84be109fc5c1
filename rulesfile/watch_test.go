package rulesfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/ratekit/ratekit/rules"
)

// wait bounds every wait for the watcher, which does real file I/O.
const wait = 5 * time.Second

// A fakeTarget records the configs it is given and fails while fail is
// set.
type fakeTarget struct {
	mu      sync.Mutex
	configs []rules.Config
	fail    error
}

func (f *fakeTarget) Load(c rules.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.configs = append(f.configs, c)
	return f.fail
}

func (f *fakeTarget) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// domains returns the domains of the configs given so far.
func (f *fakeTarget) domains() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ds []string
	for _, c := range f.configs {
		ds = append(ds, c.Domain)
	}
	return ds
}

// config returns the i'th config given.
func (f *fakeTarget) config(i int) rules.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.configs[i]
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A harness watches a rules file in a temporary directory.
type harness struct {
	t       *testing.T
	inPlace bool
	dir     string
	path    string
	target  *fakeTarget
	logs    *syncBuffer
	hooks   chan error
	w       *Watcher
}

// A mode is a way of watching.
type mode struct {
	name string
	opts []Option
	// inPlace is set when the test may rewrite the file in place. With
	// polling alone, a poll between the truncation and the write of the
	// file reads it empty (and rejects it, as it should), so polling
	// tests save files whole, by renaming.
	inPlace bool
}

// The two ways of watching: fsnotify alone (polling too rarely to matter
// in a test) and polling alone.
var modes = []mode{
	{"fsnotify", []Option{WithPollInterval(time.Hour)}, true},
	{"polling", []Option{WithPolling(), WithPollInterval(10 * time.Millisecond)}, false},
}

// rulesFor returns a valid rules file with the given domain.
func rulesFor(domain string) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n", domain)
}

// startAt starts watching path, which the caller has created, in mode
// m with the extra options.
func startAt(t *testing.T, dir, path string, m mode, extra ...Option) *harness {
	t.Helper()
	h := &harness{
		t: t, inPlace: m.inPlace, dir: dir, path: path,
		target: &fakeTarget{},
		logs:   &syncBuffer{},
		hooks:  make(chan error, 100),
	}
	opts := append([]Option{
		WithLogger(slog.New(slog.NewTextHandler(h.logs, nil))),
		WithReloadHook(func(err error) {
			select {
			case h.hooks <- err:
			default:
				panic("reload hook called more than 100 times")
			}
		}),
	}, m.opts...)
	w, err := Watch(h.target, path, append(opts, extra...)...)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	h.w = w
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// start writes a rules file with domain "v1" and watches it.
func start(t *testing.T, m mode, extra ...Option) *harness {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, rulesFor("v1"))
	return startAt(t, dir, path, m, extra...)
}

// save writes the watched file: in place if the mode allows, else by
// renaming a new file over it.
func (h *harness) save(content string) {
	h.t.Helper()
	if h.inPlace {
		write(h.t, h.path, content)
		return
	}
	tmp := filepath.Join(h.dir, ".rules.yaml.tmp")
	write(h.t, tmp, content)
	if err := os.Rename(tmp, h.path); err != nil {
		h.t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// next waits for the next call of the reload hook.
func (h *harness) next() error {
	h.t.Helper()
	select {
	case err := <-h.hooks:
		return err
	case <-time.After(wait):
		h.t.Fatalf("no reload within %v; target got %v; logs:\n%s", wait, h.target.domains(), h.logs)
		return nil
	}
}

// reloaded waits for a successful reload and checks the domains the
// target has been given.
func (h *harness) reloaded(domains ...string) {
	h.t.Helper()
	if err := h.next(); err != nil {
		h.t.Fatalf("reload failed: %v", err)
	}
	if got := h.target.domains(); !equal(got, domains) {
		h.t.Fatalf("target got domains %v, want %v", got, domains)
	}
	if !strings.Contains(h.logs.String(), `level=INFO msg="ratekit: rules reloaded" path=`+h.path) {
		h.t.Errorf("no reload logged:\n%s", h.logs)
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}

func TestWatchReloadsEdit(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			h := start(t, m)
			if got := h.target.domains(); !equal(got, []string{"v1"}) {
				t.Fatalf("Watch loaded %v, want [v1]", got)
			}
			h.save(rulesFor("v2"))
			h.reloaded("v1", "v2")
			h.save(rulesFor("v3-longer"))
			h.reloaded("v1", "v2", "v3-longer")
			if got := h.target.config(2).Source; got != h.path {
				t.Errorf("Source = %q, want %q", got, h.path)
			}
		})
	}
}

func TestWatchRejectsInvalidFile(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			h := start(t, m)
			h.save("domain: v2\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n")
			err := h.next()
			var re *rules.Error
			if !errors.As(err, &re) || re.Source != h.path || re.Line != 4 {
				t.Fatalf("hook got %v, want a *rules.Error at %s:4", err, h.path)
			}
			if got := h.target.domains(); !equal(got, []string{"v1"}) {
				t.Errorf("target got %v, want only the first config", got)
			}
			logs := h.logs.String()
			want := fmt.Sprintf(`level=WARN msg="ratekit: rules reload rejected; previous rules kept" path=%s error=`, h.path)
			if strings.Count(logs, want) != 1 || !strings.Contains(logs, "rate_limt") {
				t.Errorf("want one warning %q with the error; logs:\n%s", want, logs)
			}

			// A fixed file is loaded.
			h.save(rulesFor("v3"))
			h.reloaded("v1", "v3")
		})
	}
}

func TestWatchTargetRejects(t *testing.T) {
	h := start(t, modes[0])
	errBad := errors.New("bad rules")
	h.target.setFail(errBad)
	h.save(rulesFor("v2"))
	if err := h.next(); !errors.Is(err, errBad) {
		t.Fatalf("hook got %v, want the target's error", err)
	}
	if !strings.Contains(h.logs.String(), `level=WARN msg="ratekit: rules reload rejected; previous rules kept" path=`+h.path+` error="bad rules"`) {
		t.Errorf("no warning logged:\n%s", h.logs)
	}
	h.target.setFail(nil)
	h.save(rulesFor("v3"))
	h.reloaded("v1", "v2", "v3")
}

// TestWatchRenameOver saves the file as editors do: write a temporary
// file and rename it over the old one.
func TestWatchRenameOver(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			h := start(t, m)
			for _, d := range []string{"v2", "v3-longer"} {
				tmp := filepath.Join(h.dir, ".rules.yaml.swp")
				write(t, tmp, rulesFor(d))
				if err := os.Rename(tmp, h.path); err != nil {
					t.Fatal(err)
				}
				if err := h.next(); err != nil {
					t.Fatalf("reload failed: %v", err)
				}
			}
			if got := h.target.domains(); !equal(got, []string{"v1", "v2", "v3-longer"}) {
				t.Errorf("target got %v", got)
			}
		})
	}
}

// TestWatchSymlinkSwap updates the file as a Kubernetes ConfigMap volume
// does: rules.yaml -> ..data/rules.yaml, ..data -> ..<timestamp>, and an
// update creates a new timestamped directory and renames a new ..data
// symbolic link over the old one.
func TestWatchSymlinkSwap(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			version := func(name, domain string) {
				if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(dir, name, "rules.yaml"), rulesFor(domain))
			}
			symlink := func(target, link string) {
				if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
			}
			version("..2024_01_01", "v1")
			symlink("..2024_01_01", "..data")
			symlink("..data/rules.yaml", "rules.yaml")
			h := startAt(t, dir, filepath.Join(dir, "rules.yaml"), m)

			for i, d := range []string{"v2", "v3"} {
				old := fmt.Sprintf("..2024_01_0%d", i+1)
				cur := fmt.Sprintf("..2024_01_0%d", i+2)
				version(cur, d)
				symlink(cur, "..data_tmp")
				if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
				if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
					t.Fatal(err)
				}
				if err := h.next(); err != nil {
					t.Fatalf("reload failed: %v", err)
				}
			}
			if got := h.target.domains(); !equal(got, []string{"v1", "v2", "v3"}) {
				t.Errorf("target got %v", got)
			}
		})
	}
}

func TestWatchDeleteAndRecreate(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			h := start(t, m)
			if err := os.Remove(h.path); err != nil {
				t.Fatal(err)
			}
			if err := h.next(); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("hook got %v, want a not-exist error", err)
			}
			want := `level=WARN msg="ratekit: rules file missing; keeping the current rules" path=` + h.path
			if !strings.Contains(h.logs.String(), want) {
				t.Errorf("want %q logged; logs:\n%s", want, h.logs)
			}

			// The file comes back as it was: it is loaded again.
			h.save(rulesFor("v1"))
			h.reloaded("v1", "v1")
			if n := strings.Count(h.logs.String(), "missing"); n != 1 {
				t.Errorf("missing file logged %d times, want once:\n%s", n, h.logs)
			}

			if err := os.Remove(h.path); err != nil {
				t.Fatal(err)
			}
			if err := h.next(); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("hook got %v, want a not-exist error", err)
			}
			h.save(rulesFor("v2"))
			h.reloaded("v1", "v1", "v2")
		})
	}
}

// TestWatchUnchangedContent rewrites the file with the same content and a
// new modification time: the watcher reads it and does not reload it.
func TestWatchUnchangedContent(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "rules.yaml")
			content := rulesFor("v1")
			write(t, path, content)
			// An old modification time, so that polling trusts it and
			// reads the file only when it changes.
			past := time.Now().Add(-time.Hour)
			if err := os.Chtimes(path, past, past); err != nil {
				t.Fatal(err)
			}
			unchanged := make(chan struct{}, 1)
			h := startAt(t, dir, path, m, func(c *config) {
				c.onUnchanged = func() {
					select {
					case unchanged <- struct{}{}:
					default:
					}
				}
			})
			select {
			case <-unchanged:
				t.Fatal("file read before it changed")
			default:
			}

			h.save(content)
			select {
			case <-unchanged:
			case <-time.After(wait):
				t.Fatal("the rewritten file was not checked")
			}
			select {
			case err := <-h.hooks:
				t.Fatalf("reload hook called with %v for unchanged content", err)
			default:
			}
			if got := h.target.domains(); !equal(got, []string{"v1"}) {
				t.Errorf("target got %v, want only the first load", got)
			}

			// A real change after it is still loaded.
			h.save(rulesFor("v2"))
			h.reloaded("v1", "v2")
		})
	}
}

// TestWatchFallsBackToPolling makes fsnotify fail: the watcher logs that
// once and polls.
func TestWatchFallsBackToPolling(t *testing.T) {
	h := start(t, mode{opts: []Option{WithPollInterval(10 * time.Millisecond)}}, func(c *config) {
		c.newNotifier = func() (*fsnotify.Watcher, error) { return nil, errors.New("too many open files") }
	})
	want := `level=WARN msg="ratekit: rules file notifications unavailable; polling" path=` + h.path +
		` interval=10ms error="too many open files"`
	if !strings.Contains(h.logs.String(), want) {
		t.Errorf("want %q logged; logs:\n%s", want, h.logs)
	}
	h.save(rulesFor("v2"))
	h.reloaded("v1", "v2")
	if n := strings.Count(h.logs.String(), "unavailable"); n != 1 {
		t.Errorf("fallback logged %d times, want once", n)
	}
}

func TestWatchFirstLoadFails(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	target := &fakeTarget{}

	if _, err := Watch(target, path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Watch of a missing file: got %v, want a not-exist error", err)
	}
	write(t, path, "domain: [\n")
	w, err := Watch(target, path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":1: invalid YAML") || w != nil {
		t.Errorf("Watch of an invalid file: got %v, %v", w, err)
	}
	errBad := errors.New("bad rules")
	target.setFail(errBad)
	write(t, path, rulesFor("v1"))
	if _, err := Watch(target, path); !errors.Is(err, errBad) {
		t.Errorf("Watch with a failing target: got %v, want the target's error", err)
	}
	if got := target.domains(); !equal(got, []string{"v1"}) {
		t.Errorf("target got %v", got)
	}
	waitGoroutines(t, before)
}

// TestWatchClose checks that Close stops the watcher while the file keeps
// changing: the hook is never called after Close returns and no goroutine
// is left.
func TestWatchClose(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			dir := t.TempDir()
			path := filepath.Join(dir, "rules.yaml")
			write(t, path, rulesFor("v0"))
			var closed atomic.Bool
			reloads := make(chan struct{}, 1)
			w, err := Watch(&fakeTarget{}, path, append(m.opts,
				WithLogger(slog.New(slog.DiscardHandler)),
				WithReloadHook(func(error) {
					if closed.Load() {
						panic("reload hook called after Close")
					}
					select {
					case reloads <- struct{}{}:
					default:
					}
				}))...)
			if err != nil {
				t.Fatal(err)
			}

			defer w.Close()
			stop := make(chan struct{})
			writerDone := make(chan struct{})
			stopWriter := sync.OnceFunc(func() {
				close(stop)
				<-writerDone
			})
			defer stopWriter()
			go func() {
				defer close(writerDone)
				for i := 1; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					tmp := path + ".tmp"
					if os.WriteFile(tmp, []byte(rulesFor(fmt.Sprint("v", i))), 0o644) == nil {
						os.Rename(tmp, path)
					}
					runtime.Gosched()
				}
			}()
			select {
			case <-reloads:
			case <-time.After(wait):
				t.Fatal("no reload")
			}
			if err := w.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			closed.Store(true)
			if err := w.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			stopWriter()
			waitGoroutines(t, before)
		})
	}
}

// waitGoroutines waits, for a bounded time, until no more goroutines run
// than n: goroutines that have been told to exit may take a moment to.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines running, want %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	target := &fakeTarget{}

	if err := Load(target, path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: got %v", err)
	}
	write(t, path, "domain: x\nunknown: 1\n")
	if err := Load(target, path); err == nil || !strings.HasPrefix(err.Error(), path+`:2: unknown key "unknown"`) {
		t.Errorf("Load of an invalid file: got %v", err)
	}
	write(t, path, rulesFor("v1"))
	if err := Load(target, path); err != nil {
		t.Errorf("Load: %v", err)
	}
	errBad := errors.New("bad rules")
	target.setFail(errBad)
	if err := Load(target, path); !errors.Is(err, errBad) {
		t.Errorf("Load with a failing target: got %v", err)
	}
	if got := target.domains(); !equal(got, []string{"v1", "v1"}) || target.configs[0].Source != path {
		t.Errorf("target got %v", target.configs)
	}
}

// rejections returns the lines of logs that report a rejection.
func rejections(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `msg="ratekit: rules reload rejected; previous rules kept"`) {
			out = append(out, line)
		}
	}
	return out
}

// TestWatchLogsEachError saves a file with two errors that Parse finds and
// then one with two errors the target's Load finds: each error is a
// warning of its own, with the path, on one line; and polling the
// unchanged bad file logs nothing more.
func TestWatchLogsEachError(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			polls := make(chan struct{}, 100)
			h := start(t, m, func(c *config) {
				c.onUnchanged = func() {
					select {
					case polls <- struct{}{}:
					default:
					}
				}
			})
			h.save("domain: v2\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n  - kee: b\n")
			if err := h.next(); err == nil {
				t.Fatal("hook got nil, want Parse's errors")
			}
			got := rejections(h.logs.String())
			if len(got) != 2 {
				t.Fatalf("want 2 warnings, one per error; logs:\n%s", h.logs)
			}
			for i, frag := range []string{`:4: descriptors[0]: unknown key \"rate_limt\"`, `:5: descriptors[1]: unknown key \"kee\"`} {
				want := `level=WARN msg="ratekit: rules reload rejected; previous rules kept" path=` + h.path + ` error="` + h.path + frag
				if !strings.Contains(got[i], want) {
					t.Errorf("warning %d:\n got %s\nwant %s...", i, got[i], want)
				}
				if strings.Contains(got[i], `\n`) {
					t.Errorf("warning %d holds a line break: %s", i, got[i])
				}
			}

			if m.name == "polling" {
				// The file is recent, so every poll reads it: wait for a
				// few polls of the unchanged bad file.
				for i := 0; i < 3; i++ {
					select {
					case <-polls:
					case <-time.After(wait):
						t.Fatal("the file was not polled")
					}
				}
				if n := len(rejections(h.logs.String())); n != 2 {
					t.Errorf("%d warnings after polling the unchanged file, want still 2:\n%s", n, h.logs)
				}
				select {
				case err := <-h.hooks:
					t.Errorf("reload hook called again (%v) for the unchanged file", err)
				default:
				}
			}

			// The target refuses with two errors, joined as
			// rules.Engine.Load joins them.
			h.target.setFail(errors.Join(errors.New("first problem"), errors.New("second problem")))
			h.save(rulesFor("v3"))
			if err := h.next(); err == nil {
				t.Fatal("hook got nil, want the target's errors")
			}
			got = rejections(h.logs.String())[2:]
			if len(got) != 2 || !strings.HasSuffix(got[0], `path=`+h.path+` error="first problem"`) ||
				!strings.HasSuffix(got[1], `path=`+h.path+` error="second problem"`) {
				t.Errorf("want one warning per error of the target; logs:\n%s", h.logs)
			}
			if got := h.target.domains(); !equal(got, []string{"v1", "v3"}) {
				t.Errorf("target got %v", got)
			}
		})
	}
}

func TestLogRejected(t *testing.T) {
	logs := &syncBuffer{}
	l := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	const msg = `level=WARN msg="ratekit: rules reload rejected; previous rules kept" key=k `
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	many := make([]error, 103)
	for i := range many {
		many[i] = fmt.Errorf("e%d", i)
	}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"nil", nil, nil},
		{"one", a, []string{"error=a"}},
		{"joined, nested, with nils", errors.Join(a, nil, errors.Join(b, c)), []string{"error=a", "error=b", "error=c"}},
		{"a message of its own is kept", fmt.Errorf("loading: %w; %w", a, b), []string{`error="loading: a; b"`}},
		{"wrapped join is kept", fmt.Errorf("x: %w", errors.Join(a, b)), []string{`error="x: a\nb"`}},
		{"capped", errors.Join(many...), append(func() []string {
			var w []string
			for i := 0; i < 100; i++ {
				w = append(w, fmt.Sprintf("error=e%d", i))
			}
			return w
		}(), "more=3")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.mu.Lock()
			logs.b.Reset()
			logs.mu.Unlock()
			LogRejected(l, tc.err, "key", "k")
			var want string
			for _, w := range tc.want {
				want += msg + w + "\n"
			}
			if got := logs.String(); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
