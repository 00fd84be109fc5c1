package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/redistest"
)

func TestDbgServerTime(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, nil)
	ctx := context.Background()
	for _, alg := range algorithms {
		c := bindAll(t, s, core.Limit{Name: "bench", Algorithm: alg, Rate: core.PerSecond(10_000)})
		ds := make([]core.Decision, 1)
		rdb.ConfigResetStat(ctx)
		for i := 0; i < 5000; i++ {
			c.Take(ctx, "k"+string(rune('a'+i%20)), 1, ds)
		}
		info := rdb.Info(ctx, "commandstats").Val()
		for _, l := range strings.Split(info, "\n") {
			if strings.Contains(l, "fcall") || strings.Contains(l, "evalsha") {
				t.Log(alg, strings.TrimSpace(l))
			}
		}
	}
}
