package rules_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/rules"
)

// chains returns a config of n chains of generic_key descriptors nested
// depth deep, each a block-list entry (requests_per_unit 0, which needs
// no counters).
func chains(n, depth int) rules.Config {
	var ds []rules.Descriptor
	for c := range n {
		var d *rules.Descriptor
		for l := depth - 1; l >= 0; l-- {
			nd := rules.Descriptor{Key: "generic_key", Value: fmt.Sprintf("chain%d-level%d", c, l),
				RateLimit: &rules.RateLimit{Unit: "second"}}
			if d != nil {
				nd.Descriptors = []rules.Descriptor{*d}
			}
			d = &nd
		}
		ds = append(ds, *d)
	}
	return rules.Config{Domain: "deep", Descriptors: ds}
}

// The rules in force keep what deciding needs, not the identity that
// named each rule's limit: that grows with the rule's depth, so that a
// deep config kept a heap quadratic in its depth.
func TestRulesKeepNoIdentity(t *testing.T) {
	cfg := chains(4, 500) // 2,000 rules, 250 deep on average
	e, err := rules.NewEngine()
	require.NoError(t, err)
	base := liveHeap(0)
	require.NoError(t, e.Load(cfg))
	heap := liveHeap(0) - base
	t.Logf("2,000 rules in 4 chains 500 deep: %.1f MB retained", float64(heap)/1e6)
	// Each rule costs about 1.5 kB, its identity about 11 kB more.
	require.Less(t, heap, uint64(8e6), "the rules retain their identities")
	require.Len(t, e.Limits(), 2000)
	runtime.KeepAlive(e)
}
