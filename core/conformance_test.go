package core_test

import (
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

func newMemory(t *testing.T, c core.Clock) core.Store {
	s, err := core.NewMemoryStore(core.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, newMemory)
}

func TestMemoryStoreConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c core.Clock) core.Store {
		s, err := core.NewMemoryStore(core.WithClock(c), core.WithShards(1), core.WithMaxKeys(4))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
