package hybrid_test

// RATEKIT_MEASURE=1 runs the measurements as well (TestMeasure*, the
// tables of docs/redis.md about regions, in real time: about two minutes).

import (
	"testing"

	"github.com/ratekit/ratekit/redisstore/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
