package redisstore_test

import (
	"context"
	"math/big"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/redisstore/redistest"
)

// TestScriptArithmetic checks the script's integer helpers, run by Redis's
// Lua on doubles, against exact big-integer arithmetic, with operands
// whose products are far beyond the 2^53 that doubles hold exactly.
func TestScriptArithmetic(t *testing.T) {
	src, err := os.ReadFile("decide.lua")
	require.NoError(t, err)
	helpers, _, ok := strings.Cut(string(src), "-- The algorithms.")
	require.True(t, ok, "decide.lua has moved its helpers")
	script := redis.NewScript(helpers + `
bind()
local q, r = muldiv(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
return {string.format('%d', q), string.format('%d', r), string.format('%d', floordiv(tonumber(ARGV[4]), tonumber(ARGV[3])))}
`)
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const max52 = 1 << 52
	for i := 0; i < 2000; i++ {
		// a up to 2^31 (a count), b <= c below 2^52 (times), or b > c with
		// a < c (the retry of the sliding window counter).
		var a, b, c int64
		switch i % 3 {
		case 0:
			a, c = rng.Int64N(1<<31), 1+rng.Int64N(max52-1)
			b = rng.Int64N(c + 1)
		case 1:
			c = 1 + rng.Int64N(1<<31)
			a, b = rng.Int64N(c), rng.Int64N(max52)
		default:
			a, b, c = rng.Int64N(1<<20), rng.Int64N(1<<20), 1+rng.Int64N(1<<20)
		}
		n := rng.Int64N(max52) - max52/2 // for floordiv, negative too
		res, err := script.Run(ctx, rdb, []string{"k"}, a, b, c, n).StringSlice()
		require.NoError(t, err)

		prod := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		q, r := new(big.Int).QuoRem(prod, big.NewInt(c), new(big.Int))
		fq := new(big.Int).Div(big.NewInt(n), big.NewInt(c)) // Euclidean: floor for c > 0
		require.Equal(t, []string{q.String(), r.String(), fq.String()}, res,
			"muldiv(%d, %d, %d), floordiv(%d, %d)", a, b, c, n, c)
	}
}
