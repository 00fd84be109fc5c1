package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/queue/queuetest"
)

// TestMemoryBackend: the memory queue bounds each key's share and serves
// the keys in turn (queuetest.Backend).
func TestMemoryBackend(t *testing.T) {
	queuetest.Backend(t, func(t *testing.T, capacity, perKey int, visibility time.Duration) queue.Queue {
		q, err := queue.NewMemory(queue.MemoryOptions{Capacity: capacity, PerKey: perKey, Visibility: visibility})
		require.NoError(t, err)
		return q
	})
}
