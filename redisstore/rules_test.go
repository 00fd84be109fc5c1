package redisstore_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rules"
)

// TestRulesShareRedis: two servers' rules engines on one Redis share the
// counts of the same rules, and a reload on one of them (a raised limit)
// keeps the counts, as in the memory store.
func TestRulesShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock(storetest.Epoch)
	prefix := redisstore.WithPrefix(newPrefix())
	login := func(n int) rules.Config {
		return rules.Config{Domain: "auth", Descriptors: []rules.Descriptor{{
			Key:       "remote_address",
			Match:     &rules.Match{Methods: []string{"POST"}, Path: "/login"},
			RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: n},
		}}}
	}
	engine := func() *rules.Engine {
		s, err := redisstore.New(srv.Client(t), prefix, redisstore.WithClock(clock.Now))
		require.NoError(t, err)
		e, err := rules.NewEngine(rules.WithStore(s))
		require.NoError(t, err)
		require.NoError(t, e.Load(login(5)))
		return e
	}
	a, b := engine(), engine()
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "192.0.2.1:4000"
	req := rules.HTTPRequest(r)
	decide := func(e *rules.Engine) (bool, int) {
		var buf [8]core.Check
		checks, err := e.Checks(req, buf[:0])
		require.NoError(t, err)
		require.Len(t, checks, 1)
		d, err := core.TakeAll(context.Background(), checks, 1)
		require.NoError(t, err)
		return d.Allowed, d.Remaining
	}

	for i := range 3 {
		allowed, remaining := decide([]*rules.Engine{a, b}[i%2])
		require.True(t, allowed)
		assert.Equal(t, 4-i, remaining)
	}
	require.NoError(t, b.Load(login(6)))
	allowed, remaining := decide(b)
	assert.True(t, allowed)
	assert.Equal(t, 2, remaining, "3 of 5 used on either server, then 6: 2 left after this one")
	allowed, _ = decide(a)
	assert.True(t, allowed, "server a, still at 5, admits the 5th")
	allowed, _ = decide(a)
	assert.False(t, allowed)
	allowed, _ = decide(b)
	assert.True(t, allowed, "server b, at 6, admits a 6th")
	allowed, _ = decide(b)
	assert.False(t, allowed)
}
