package rulesfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/rulesfile"
)

// A file over MaxSize is refused by name, without being read whole.
func TestLoadRefusesHugeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("domain: api\ndescriptors:\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil { // a sparse gigabyte
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	err = rulesfile.Load(newEngine(t), path)
	if err == nil || !strings.Contains(err.Error(), "larger than 4194304 bytes") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Load: got %v, want an error naming %s and the size limit", err, path)
	}
	if _, err := rulesfile.Watch(newEngine(t), path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Watch: got %v, want the size error", err)
	}
}
