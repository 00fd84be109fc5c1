package ratekitotel_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	ratekitotel "github.com/ratekit/ratekit/otel"
)

// TestOutOfMemory: WithOutOfMemory records the count a Redis store keeps
// of the decisions it made while Redis was out of memory, read at each
// collection and summed over the stores given, as a monotonic sum; without
// it there is no such instrument.
func TestOutOfMemory(t *testing.T) {
	h := newHarness(t)
	var a, b atomic.Int64
	_, err := ratekitotel.New(h.mp, ratekitotel.WithStore("redis"),
		ratekitotel.WithOutOfMemory(a.Load), ratekitotel.WithOutOfMemory(b.Load))
	require.NoError(t, err)
	a.Add(120)
	b.Add(3)
	got, ok := h.collect()["ratekit.store.out_of_memory"]
	require.True(t, ok)
	sum, ok := got.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%T", got.Data)
	assert.True(t, sum.IsMonotonic)
	require.Len(t, sum.DataPoints, 1)
	assert.Equal(t, int64(123), sum.DataPoints[0].Value)
	assert.Equal(t, attrs("store", "redis"), sum.DataPoints[0].Attributes)
	assert.Equal(t, "{decision}", got.Unit)

	plain := newHarness(t)
	_, err = ratekitotel.New(plain.mp)
	require.NoError(t, err)
	_, ok = plain.collect()["ratekit.store.out_of_memory"]
	assert.False(t, ok, "no instrument without WithOutOfMemory")

	_, err = ratekitotel.New(plain.mp, ratekitotel.WithOutOfMemory(nil))
	require.EqualError(t, err, "ratekitotel: WithOutOfMemory: the count is nil")
}
