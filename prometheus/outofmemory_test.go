package ratekitprom_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	ratekitprom "github.com/ratekit/ratekit/prometheus"
)

// TestOutOfMemory: WithOutOfMemory exports the count a Redis store keeps
// of the decisions it made while Redis was out of memory, read at each
// scrape and summed over the stores given; without it there is no such
// series.
func TestOutOfMemory(t *testing.T) {
	var a, b atomic.Int64
	m, err := ratekitprom.New(ratekitprom.WithStore("redis"),
		ratekitprom.WithOutOfMemory(a.Load), ratekitprom.WithOutOfMemory(b.Load))
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	want := func(n string) string {
		return `# HELP ratekit_store_out_of_memory_total Decisions the Redis store made while Redis was out of memory (maxmemory): clients with a key decided in Redis, new clients in process. Above zero, Redis is full.
# TYPE ratekit_store_out_of_memory_total counter
ratekit_store_out_of_memory_total{store="redis"} ` + n + "\n"
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want("0")), "ratekit_store_out_of_memory_total"))
	a.Add(120)
	b.Add(3)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want("123")), "ratekit_store_out_of_memory_total"))

	plain, err := ratekitprom.New()
	require.NoError(t, err)
	reg = prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(plain))
	n, err := testutil.GatherAndCount(reg, "ratekit_store_out_of_memory_total")
	require.NoError(t, err)
	require.Zero(t, n, "no series without WithOutOfMemory")

	_, err = ratekitprom.New(ratekitprom.WithOutOfMemory(nil))
	require.EqualError(t, err, "ratekitprom: WithOutOfMemory: the count is nil")
}
