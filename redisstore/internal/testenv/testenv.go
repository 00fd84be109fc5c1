// Package testenv is the environment that the tests of the Redis stores
// (redisstore and redisstore/hybrid) share: go-redis's own log lines
// dropped, the RATEKIT_MEASURE switch, and a buffer for the stores' logs.
// Only tests import it.
package testenv

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Main runs the tests of a package, m, with go-redis's own log lines (one
// per failed dial while a test has stopped its server) dropped: the tests
// assert on ratekit's logs instead. A package's TestMain calls it.
func Main(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// quiet is a go-redis logger that drops every line.
type quiet struct{}

// Printf drops the line.
func (quiet) Printf(context.Context, string, ...any) {}

// Measuring reports whether RATEKIT_MEASURE is set: the measurements run,
// and the tests made small to keep the suite short run at full size.
func Measuring() bool { return os.Getenv("RATEKIT_MEASURE") != "" }

// SkipUnlessMeasuring skips a measurement unless RATEKIT_MEASURE is set.
func SkipUnlessMeasuring(t *testing.T) {
	t.Helper()
	if !Measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
}

// A SyncBuffer is a bytes.Buffer safe for the loggers of several
// goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
