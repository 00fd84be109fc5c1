package rulesfile_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// These tests load files into a real *rules.Engine: Parse checks the
// file's shape, the engine the meaning of the rules, and both report
// errors as "file:line: path: message".

var discard = slog.New(slog.DiscardHandler)

// newEngine returns an engine that knows the descriptor keys of the
// examples.
func newEngine(t *testing.T) *rules.Engine {
	t.Helper()
	var opts []rules.Option
	for _, k := range []string{"database", "message_type", "to_number", "key", "subkey", "key2", "key3"} {
		opts = append(opts, rules.WithKey(k, func(rules.Request) (string, error) { return "", nil }))
	}
	e, err := rules.NewEngine(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEngineLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	e := newEngine(t)
	for _, ex := range examples {
		writeFile(t, path, ex.yaml)
		if err := rulesfile.Load(e, path); err != nil {
			t.Errorf("%s: Load: %v", ex.name, err)
			continue
		}
		want := ex.want
		want.Source = path
		if got := e.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: engine has %s\nwant %s", ex.name, dump(got), dump(want))
		}
	}
}

func TestEngineRejectsWithLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	e := newEngine(t)
	writeFile(t, path, `domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: fortnight
      requests_per_unit: 10
`)
	err := rulesfile.Load(e, path)
	var re *rules.Error
	if !errors.As(err, &re) {
		t.Fatalf("Load: got %v, want a *rules.Error", err)
	}
	prefix := path + ":4: descriptors[0].rate_limit: "
	if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), "fortnight") {
		t.Errorf("Load: got %q, want %q and the bad unit", err, prefix+"...")
	}
	if re.Source != path || re.Line != 4 {
		t.Errorf("Load: error at %s:%d, want %s:4", re.Source, re.Line, path)
	}
}

// TestEngineWatch reloads a file into an engine: a semantically invalid
// edit is rejected with its line and the engine keeps its rules.
func TestEngineWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	e := newEngine(t)
	writeFile(t, path, "domain: v1\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	hooks := make(chan error, 10)
	w, err := rulesfile.Watch(e, path, rulesfile.WithReloadHook(func(err error) { hooks <- err }),
		rulesfile.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func() error {
		t.Helper()
		select {
		case err := <-hooks:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("no reload")
			return nil
		}
	}

	writeFile(t, path, "domain: v2\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	if err := next(); err == nil || !strings.HasPrefix(err.Error(), path+":4: descriptors[0].rate_limit: ") {
		t.Fatalf("reload: got %v, want the engine's error at line 4", err)
	}
	if d := e.Config().Domain; d != "v1" {
		t.Errorf("engine domain %q after a rejected reload, want v1", d)
	}

	writeFile(t, path, "domain: v3\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	if err := next(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if d := e.Config().Domain; d != "v3" {
		t.Errorf("engine domain %q, want v3", d)
	}
}

var _ rulesfile.Target = (*rules.Engine)(nil)
