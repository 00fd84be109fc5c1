package core_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// A grant on a limiter of two limits is given under both and pays for the
// request under both: a key over both limits gets exactly the grant.
func TestGrantAcrossLimits(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	lim, err := core.NewLimiter(core.Limit{Name: "second", Algorithm: core.TokenBucket, Rate: core.PerSecond(3)},
		core.WithLimit(core.Limit{Name: "minute", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}),
		core.WithStore(&core.MemoryStore{Clock: clock.Now}), core.WithLogger(discard))
	require.NoError(t, err)
	for i := 0; i < 6; i++ {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, i < 5, d.Allowed, "request %d", i)
		clock.Advance(400 * time.Millisecond) // the bucket refills one every 333 ms
	}
	st, err := lim.Inspect(ctx, "k")
	require.NoError(t, err)
	require.False(t, st.Decision.Allowed)

	require.NoError(t, lim.Grant(ctx, "k", 3, "incident 12"))
	st, err = lim.Inspect(ctx, "k")
	require.NoError(t, err)
	require.True(t, st.Tracked)
	require.Len(t, st.Limits, 2)
	for _, ls := range st.Limits {
		assert.Equal(t, core.Grant{Amount: 3, ExpiresIn: time.Minute}, ls.Grant, "%s: the grant lasts the longest window", ls.Decision.Name)
	}
	for i := 0; i < 3; i++ {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed && d.Granted, "granted request %d: %+v", i, d)
	}
	d, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed, "the grant is used up and the minute's 5 too")
	require.False(t, d.Granted)
}

// When another check rejects a request that a grant paid for, TakeAll
// gives the grant back.
func TestTakeAllRefundsGrant(t *testing.T) {
	ctx := context.Background()
	store := &core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now}
	a := core.Must(core.NewLimiter(core.Limit{Name: "a", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithStore(store), core.WithLogger(discard)))
	b := core.Must(core.NewLimiter(core.Limit{Name: "b", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)}, core.WithStore(store)))
	_, err := a.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.NoError(t, a.Grant(ctx, "k", 1, ""))
	_, err = b.Take(ctx, "other", 1)
	require.NoError(t, err)

	d, err := core.TakeAll(ctx, []core.Check{{Limiter: a, Key: "k"}, {Limiter: b, Key: "other"}}, 1)
	require.NoError(t, err)
	require.False(t, d.Allowed, "b rejects")
	st, err := a.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, 1, st.Limits[0].Grant.Amount, "the grant paid for a request that was rejected: given back")
}

// Resets and grants are logged once each, with the reason and a hash of
// the key, never the key; observers see them, failures included.
func TestOperatorActionsLoggedAndObserved(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	var mu sync.Mutex
	var actions []core.Action
	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(10)},
		core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))),
		core.WithActionObserver(func(a core.Action) { mu.Lock(); actions = append(actions, a); mu.Unlock() }))
	require.NoError(t, err)
	const key = "198.51.100.7"
	_, err = lim.Take(ctx, key, 1)
	require.NoError(t, err)
	found, err := lim.Reset(ctx, key, "ticket 4711")
	require.NoError(t, err)
	require.True(t, found)
	found, err = lim.Reset(ctx, key, "")
	require.NoError(t, err)
	require.False(t, found, "nothing left to reset")
	require.NoError(t, lim.Grant(ctx, key, 5, "launch day"))
	err = lim.Grant(ctx, key, 0, "typo")
	require.ErrorIs(t, err, core.ErrInvalidGrant)
	err = lim.Grant(ctx, key, 6, "")
	require.ErrorIs(t, err, core.ErrInvalidGrant, "5 granted and 6 more exceed the capacity of 10")

	assert.Equal(t, []core.Action{
		{Kind: core.ActionReset, Limit: "api", Found: true, Reason: "ticket 4711"},
		{Kind: core.ActionReset, Limit: "api"},
		{Kind: core.ActionGrant, Limit: "api", Amount: 5, Reason: "launch day"},
	}, []core.Action{actions[0], actions[1], actions[2]})
	require.Len(t, actions, 5)
	for _, a := range actions[3:] {
		assert.ErrorIs(t, a.Err, core.ErrInvalidGrant)
	}
	logs := buf.String()
	assert.Equal(t, 5, strings.Count(logs, "\n"), logs)
	assert.Contains(t, logs, `msg="ratekit: key reset" limit=api key_hash=`+core.KeyHash(key)+` reason="ticket 4711" found=true`)
	assert.Contains(t, logs, `msg="ratekit: key granted extra requests" limit=api key_hash=`+core.KeyHash(key)+` reason="launch day" amount=5 expires_in=1m0s`)
	assert.Contains(t, logs, `level=WARN msg="ratekit: operator grant failed"`)
	assert.NotContains(t, logs, key)
}

// Inspect tells the truth of a limiter in shadow mode: a key over its
// limit shows as rejected, though its requests pass.
func TestInspectIgnoresShadow(t *testing.T) {
	ctx := context.Background()
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithShadow()))
	for i := 0; i < 2; i++ {
		d, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	st, err := lim.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, st.Decision.Allowed)
	assert.Positive(t, st.Decision.RetryAfter)
}

func TestOperatorBadInput(t *testing.T) {
	ctx := context.Background()
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithLogger(discard)))
	_, err := lim.Inspect(ctx, "")
	assert.ErrorIs(t, err, core.ErrMissingKey)
	_, err = lim.Reset(ctx, "", "")
	assert.ErrorIs(t, err, core.ErrMissingKey)
	assert.ErrorIs(t, lim.Grant(ctx, "", 1, ""), core.ErrMissingKey)
	assert.ErrorIs(t, lim.Grant(ctx, "k", -3, ""), core.ErrInvalidGrant)

	block := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(0)}, core.WithLogger(discard)))
	assert.ErrorIs(t, block.Grant(ctx, "k", 1, ""), core.ErrInvalidGrant, "a block list entry takes no grant")
	st, err := block.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, st.Tracked)
	assert.False(t, st.Decision.Allowed)
	found, err := block.Reset(ctx, "k", "")
	require.NoError(t, err)
	assert.False(t, found)

	_, err = core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithActionObserver(nil))
	assert.Error(t, err)
}

// A store that fails: the operator gets the error, wrapped, and the log
// says so once.
func TestOperatorStoreFailure(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	lim := core.Must(core.NewLimiter(core.Limit{Rate: core.PerMinute(1)}, core.WithStore(&failingStore{}),
		core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))))
	_, err := lim.Inspect(ctx, "k")
	assert.ErrorContains(t, err, "connection refused")
	_, err = lim.Reset(ctx, "k", "why")
	assert.ErrorContains(t, err, "connection refused")
	assert.Contains(t, buf.String(), "ratekit: operator reset failed")
}

var discard = slog.New(slog.DiscardHandler)

// Example of an operator unblocking a client: what it has left, a grant of
// extra requests, a reset.
func ExampleLimiter_Grant() {
	ctx := context.Background()
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerHour(3)},
		core.WithLogger(discard)))
	for i := 0; i < 4; i++ {
		_, _ = lim.Take(ctx, "customer-42", 1)
	}
	st, _ := lim.Inspect(ctx, "customer-42")
	fmt.Println("allowed:", st.Decision.Allowed, "remaining:", st.Decision.Remaining)

	_ = lim.Grant(ctx, "customer-42", 2, "support ticket 4711")
	d, _ := lim.Take(ctx, "customer-42", 1)
	fmt.Println("allowed:", d.Allowed, "granted:", d.Granted, "remaining:", d.Remaining)

	found, _ := lim.Reset(ctx, "customer-42", "support ticket 4711")
	st, _ = lim.Inspect(ctx, "customer-42")
	fmt.Println("reset:", found, "remaining:", st.Decision.Remaining+1)
	// Output:
	// allowed: false remaining: 0
	// allowed: true granted: true remaining: 1
	// reset: true remaining: 3
}

func TestKeyHash(t *testing.T) {
	assert.Equal(t, "2c26b46b68ffc68f", core.KeyHash("foo"), "SHA-256, the first 8 bytes")
}
