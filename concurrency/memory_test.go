package concurrency_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
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

// A full store is a bound, not a store failure: a new key that finds no
// room is refused whatever the fail mode. Before, the store's ErrFull went
// to the fail mode, open by default, and a new key was admitted every
// time, held nowhere: 10 of 10 in flight at a max of 2.
func TestFullStoreRefusesWhateverTheFailMode(t *testing.T) {
	clock := storetest.NewClock(t0)
	lim, err := concurrency.NewLimiter(2, concurrency.WithStore(&concurrency.MemoryStore{MaxKeys: 32, Clock: clock.Now}))
	require.NoError(t, err)
	ctx := context.Background()
	full := ""
	for i := 0; full == "" && i < 10_000; i++ {
		k := "key-" + strconv.Itoa(i)
		_, lease, err := lim.Acquire(ctx, k)
		if err != nil {
			require.ErrorIs(t, err, concurrency.ErrFull)
			lease.Release()
			full = k
			continue
		}
		defer lease.Release()
	}
	require.NotEmpty(t, full, "no key found the store full")
	before := lim.InFlight()
	admitted := 0
	for range 10 {
		r, lease, err := lim.Acquire(ctx, full)
		assert.ErrorIs(t, err, concurrency.ErrFull)
		if r.Admitted {
			admitted++
			defer lease.Release()
			continue
		}
		assert.Equal(t, concurrency.Result{Max: 2, RetryAfter: concurrency.DefaultRetryAfter}, r)
		assert.Nil(t, lease)
	}
	assert.Zero(t, admitted, "in flight of 10 at a max of 2")
	assert.Equal(t, before, lim.InFlight())
}

// Overflow admits new keys that find the store full within a budget of
// leases over the whole store, each key still held to its max, by a
// hand-computed trace: MaxKeys 32 (one key per shard), Overflow 4, max 2.
// Of 1000 new keys, 36 are admitted: one per shard, and the first 4 that
// found their shard full, each with one lease in the overflow. A second
// lease is admitted for the 32 keys of the shards, refused (ErrFull) for
// the 4 in the overflow, which is full. Once one of those releases its
// lease, another gets its second, and its third is refused by its max. A
// full store is logged once per episode, however many keys find it full.
func TestMemoryStoreOverflowTrace(t *testing.T) {
	clock := storetest.NewClock(t0)
	var logs strings.Builder
	s := &concurrency.MemoryStore{MaxKeys: 32, Overflow: 4, Clock: clock.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := context.Background()
	const ttl = 10 * time.Second
	id := uint64(0)
	acquire := func(k string) (int, bool, error) {
		id++
		return s.Acquire(ctx, "api", k, id, 2, ttl)
	}
	var keys []string
	full := 0
	for i := range 1000 {
		k := "key-" + strconv.Itoa(i)
		held, ok, err := acquire(k)
		if err != nil {
			require.ErrorIs(t, err, concurrency.ErrFull)
			full++
			continue
		}
		require.True(t, ok)
		require.Equal(t, 1, held)
		keys = append(keys, k)
	}
	require.Len(t, keys, 36, "32 in the shards, 4 in the overflow")
	require.Equal(t, 964, full)
	assert.Equal(t, 1, strings.Count(logs.String(), "store full: new keys admitted within an overflow of 4 leases"), logs.String())

	var over []string
	for _, k := range keys {
		held, ok, err := acquire(k)
		if err != nil {
			require.ErrorIs(t, err, concurrency.ErrFull)
			over = append(over, k)
			continue
		}
		require.True(t, ok)
		require.Equal(t, 2, held)
	}
	require.Len(t, over, 4, "the overflow's keys: no room for a second lease")

	// The lease of each overflow key is the one of the first pass: id
	// i+1 for key-i.
	first := map[string]uint64{}
	for i := range 1000 {
		first["key-"+strconv.Itoa(i)] = uint64(i + 1)
	}
	require.NoError(t, s.Release(ctx, "api", over[0], first[over[0]]))
	held, ok, err := acquire(over[1])
	require.NoError(t, err)
	assert.True(t, ok, "room in the overflow again")
	assert.Equal(t, 2, held)
	held, ok, err = acquire(over[1])
	require.NoError(t, err, "held to its max, not to the budget")
	assert.False(t, ok)
	assert.Equal(t, 2, held)
	clock.Advance(5 * time.Second)
	renewed, err := s.Renew(ctx, "api", over[2], first[over[2]], ttl)
	require.NoError(t, err)
	assert.True(t, renewed, "an overflow lease renews: to 15 s")

	// At 10 s every lease but over[2]'s has ended; a new key finds room.
	clock.Advance(5 * time.Second)
	_, ok, err = acquire("newcomer")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, strings.Count(logs.String(), "has room for new keys again"), logs.String())
	_, ok, err = acquire(over[2])
	require.NoError(t, err)
	assert.True(t, ok, "over[2] holds 2 of its max of 2 in the overflow")
	_, ok, err = acquire(over[2])
	require.NoError(t, err)
	assert.False(t, ok, "held to its max in the overflow")
}

func TestMemoryStoreOverflowValidated(t *testing.T) {
	for _, n := range []int{-1, concurrency.MaxSlots + 1} {
		_, _, err := (&concurrency.MemoryStore{Overflow: n}).Acquire(context.Background(), "n", "k", 1, 1, time.Second)
		assert.ErrorContains(t, err, "Overflow")
	}
}
