package redisstore_test

// RATEKIT_MEASURE=1 runs the tests made small to keep the suite short at
// full size (TestMemoryPerClient at 100,000 clients too,
// TestOverLimitCache for 10 s of its clock: the figures of docs/redis.md).
// The hybrid store's measurements are in package hybrid.

import (
	"testing"

	"github.com/ratekit/ratekit/redisstore/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// measuring reports whether RATEKIT_MEASURE is set: the measurements run,
// and the tests made small to keep the suite short run at full size.
func measuring() bool { return testenv.Measuring() }
