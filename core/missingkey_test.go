package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
)

// TestMissingKeyEvent: a request without a key is reported once, as a
// MissingKey event of the limiter's first limit, not Decisive (no limit
// decided it), and counts nothing: by Take with an empty key, by TakeAll
// on the check whose key is empty, by a plan limiter whose plan function
// found none (limit ""), and by a plan limiter given an empty key.
func TestMissingKeyEvent(t *testing.T) {
	ctx := context.Background()
	var events []core.Event
	observe := core.WithObserver(func(e core.Event) { events = append(events, e) })
	api := core.Must(core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(5)},
		core.WithLimit(core.Limit{Name: "api-hourly", Rate: core.PerHour(50)}), observe))
	other := core.Must(core.NewLimiter(core.Limit{Name: "other", Rate: core.PerMinute(5)}, observe))
	plans := core.Must(core.NewPlanLimiter(func(_ context.Context, key string) (core.Limit, error) {
		if key == "anonymous" {
			return core.Limit{}, errors.New("no plan") // a plan error: 500, not a missing key
		}
		if key == "nobody" {
			return core.Limit{}, core.ErrMissingKey
		}
		return core.Limit{Name: "free", Rate: core.PerMinute(5)}, nil
	}, observe))
	missing := func(limit string) []core.Event {
		return []core.Event{{Limit: limit, Outcome: core.MissingKey, Decision: core.Decision{Name: limit}}}
	}
	for _, tc := range []struct {
		name string
		take func() error
		want []core.Event
	}{
		{"Take", func() error { _, err := api.Take(ctx, "", 1); return err }, missing("api")},
		{"TakeAll", func() error {
			_, err := core.TakeAll(ctx, []core.Check{{Limiter: other, Key: "k"}, {Limiter: api, Key: ""}}, 1)
			return err
		}, missing("api")},
		{"plan: none found", func() error { _, err := plans.Take(ctx, "nobody", 1); return err }, missing("")},
		{"plan: empty key", func() error { _, err := plans.Take(ctx, "", 1); return err }, missing("")},
		{"plan in TakeAll", func() error {
			_, err := core.TakeAll(ctx, []core.Check{{Limiter: other, Key: "k"}, {Limiter: plans, Key: "nobody"}}, 1)
			return err
		}, missing("")},
	} {
		events = nil
		err := tc.take()
		assert.ErrorIs(t, err, core.ErrMissingKey, tc.name)
		assert.Equal(t, tc.want, events, tc.name)
	}
	events = nil
	_, err := plans.Take(ctx, "anonymous", 1)
	require.ErrorIs(t, err, core.ErrPlan)
	assert.NotErrorIs(t, err, core.ErrMissingKey)
	assert.Empty(t, events, "a failing plan function is no missing key")

	d, err := api.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "nothing was counted")
	d, err = other.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "nothing was counted by TakeAll's other check")
}
