package concurrency_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core/storetest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A hand-computed trace: max 2, TTL 10s; ids 1..; times after t0.
func TestMemoryStoreTrace(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := &concurrency.MemoryStore{Clock: clock.Now}
	ctx := context.Background()
	const ttl = 10 * time.Second
	type step struct {
		at       time.Duration // since t0
		op       string        // acquire, release, renew
		key      string
		id       uint64
		held     int  // acquire: leases held after
		admitted bool // acquire: admitted; renew: held
	}
	steps := []step{
		{0, "acquire", "a", 1, 1, true},
		{1 * time.Second, "acquire", "a", 2, 2, true},
		{2 * time.Second, "acquire", "a", 3, 2, false}, // full
		{2 * time.Second, "acquire", "b", 4, 1, true},  // another key has its own slots
		{3 * time.Second, "release", "a", 1, 0, false},
		{3 * time.Second, "acquire", "a", 5, 2, true},  // 1's slot is back
		{4 * time.Second, "acquire", "a", 6, 2, false}, // full again
		{8 * time.Second, "renew", "a", 2, 0, true},    // 2 now ends at 18s
		// 2 was acquired at 1s: without the renewal it would end at 11s.
		{11 * time.Second, "acquire", "a", 7, 2, false},
		// 5 (acquired at 3s, never released: its holder vanished) ends at 13s.
		{12*time.Second + 999*time.Millisecond, "acquire", "a", 8, 2, false},
		{13 * time.Second, "acquire", "a", 9, 2, true},
		{13 * time.Second, "renew", "a", 5, 0, false}, // expired: not added again
		{13 * time.Second, "acquire", "a", 10, 2, false},
		{13 * time.Second, "acquire", "a", 9, 2, true}, // held: renewed, not counted twice
		{18 * time.Second, "renew", "a", 2, 0, false},  // ended at 18s
		{18 * time.Second, "acquire", "a", 11, 2, true},
	}
	for i, st := range steps {
		clock.Set(t0.Add(st.at))
		switch st.op {
		case "acquire":
			held, ok, err := s.Acquire(ctx, "api", st.key, st.id, 2, ttl)
			require.NoError(t, err)
			assert.Equal(t, st.admitted, ok, "step %d: admitted", i)
			assert.Equal(t, st.held, held, "step %d: held", i)
		case "release":
			require.NoError(t, s.Release(ctx, "api", st.key, st.id))
		case "renew":
			held, err := s.Renew(ctx, "api", st.key, st.id, ttl)
			require.NoError(t, err)
			assert.Equal(t, st.admitted, held, "step %d: renew", i)
		}
	}
}

func TestMemoryStoreNamesApart(t *testing.T) {
	s := &concurrency.MemoryStore{}
	ctx := context.Background()
	_, ok, err := s.Acquire(ctx, "uploads", "k", 1, 1, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, _ = s.Acquire(ctx, "uploads", "k", 2, 1, time.Minute)
	assert.False(t, ok, "same name, same key: shared slots")
	_, ok, _ = s.Acquire(ctx, "reports", "k", 3, 1, time.Minute)
	assert.True(t, ok, "another limiter's name has slots of its own")
}

// A flood of keys whose leases are never released cannot grow the store
// past its cap; once the leases expire, the keys are swept and new keys
// admitted again.
func TestMemoryStoreBounded(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := &concurrency.MemoryStore{MaxKeys: 64, Clock: clock.Now}
	ctx := context.Background()
	admitted, full := 0, 0
	for i := range 10_000 {
		_, ok, err := s.Acquire(ctx, "api", "flood-"+strconv.Itoa(i), uint64(i+1), 1, time.Second)
		if err != nil {
			require.ErrorIs(t, err, concurrency.ErrFull)
			full++
			continue
		}
		require.True(t, ok)
		admitted++
	}
	assert.LessOrEqual(t, admitted, 64, "at most MaxKeys keys held (2 per shard)")
	assert.Greater(t, full, 9_000)

	clock.Advance(time.Second) // every lease has expired
	_, ok, err := s.Acquire(ctx, "api", "newcomer", 1_000_000, 1, time.Second)
	require.NoError(t, err, "expired leases swept")
	assert.True(t, ok)
}

func TestMemoryStoreBadInput(t *testing.T) {
	ctx := context.Background()
	_, _, err := (&concurrency.MemoryStore{MaxKeys: -1}).Acquire(ctx, "n", "k", 1, 1, time.Second)
	assert.ErrorContains(t, err, "MaxKeys -1")
	s := &concurrency.MemoryStore{}
	_, _, err = s.Acquire(ctx, "n", "k", 1, 0, time.Second)
	assert.Error(t, err)
	_, _, err = s.Acquire(ctx, "n", "k", 1, 1, 0)
	assert.Error(t, err)
	_, err = s.Renew(ctx, "n", "k", 1, -time.Second)
	assert.Error(t, err)
	assert.NoError(t, s.Release(ctx, "n", "never-held", 7))
}

// A key seen once and released costs nothing afterwards: after many keys
// came and went, Acquire and Release on a held key allocate nothing.
func TestMemoryStoreNoAllocs(t *testing.T) {
	s := &concurrency.MemoryStore{}
	ctx := context.Background()
	_, _, _ = s.Acquire(ctx, "n", "k", 1, 4, time.Second)
	_ = s.Release(ctx, "n", "k", 1)
	allocs := testing.AllocsPerRun(100, func() {
		_, _, _ = s.Acquire(ctx, "n", "k", 1, 4, time.Second)
		_ = s.Release(ctx, "n", "k", 1)
	})
	assert.Zero(t, allocs)
}
