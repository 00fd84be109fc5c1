package redisstore_test

// RATEKIT_MEASURE=1 runs the measurements as well (TestMeasure*, the
// hybrid store's tables of docs/redis.md, in real time), and the tests made
// small to keep the suite short at full size (TestMemoryPerClient at
// 100,000 clients too, TestOverLimitCache for 10 s of its clock, the
// figures of docs/redis.md). The package then takes about 2.5 minutes
// with -race on 2 cores instead of under one.

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's own log lines (one per failed dial while a test
// has stopped its server); the tests assert on ratekit's logs instead.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// measuring reports whether RATEKIT_MEASURE is set: the measurements run,
// and the tests made small to keep the suite short run at full size.
func measuring() bool { return os.Getenv("RATEKIT_MEASURE") != "" }

// skipUnlessMeasuring skips a measurement unless RATEKIT_MEASURE is set.
func skipUnlessMeasuring(t *testing.T) {
	t.Helper()
	if !measuring() {
		t.Skip("measurement: set RATEKIT_MEASURE=1 to run")
	}
}
