package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) core.Store {
		return &core.MemoryStore{Clock: c.Now}
	})
}

func TestMemoryStoreConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) core.Store {
		return &core.MemoryStore{Clock: c.Now, Shards: 1, MaxKeys: 4}
	})
}
