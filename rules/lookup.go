package rules

import "github.com/ratekit/ratekit/core"

// An Entry is one key and value of a descriptor, as Envoy's proxy sends
// them to its rate-limit service: {Key: "remote_address", Value:
// "10.0.0.1"}.
type Entry struct {
	Key, Value string
}

// Applied is the rate limit that a descriptor gets: see Engine.Lookup.
type Applied struct {
	// RateLimit is the descriptor's rate limit as configured; Unlimited
	// for one that exempts.
	RateLimit RateLimit

	// Shadow reports that requests are counted and never rejected:
	// shadow_mode or quota_mode on the descriptor, or the engine's
	// WithShadow.
	Shadow bool

	// Limit is the name of the core limit that counts the requests (see
	// the package documentation); "" for an unlimited rate limit.
	Limit string

	// Key is the key of the counter under Limit: made of the entries'
	// values along the path, but for the values of descriptors without a
	// value and of wildcards with ShareThreshold, which share one counter.
	Key string

	// Check decides a request of the descriptor (by core.TakeAll or
	// core.TakeEach, with the checks of the request's other descriptors):
	// the limiter of Limit, in shadow mode if Shadow, and Key. Its Limiter
	// is nil for an unlimited rate limit.
	Check core.Check
}

// Lookup returns the rate limit that the rules in force apply to a
// descriptor of domain given as a list of entries, as Envoy's rate-limit
// service looks one up: none for another domain than the rules'; the first entry selects a top-level descriptor (the one
// whose value equals the entry's, else the first whose wildcard value
// matches it, else the one without a value, which an empty value also
// selects), each next entry a child of the previous one, and the rate
// limit is that of the descriptor the last entry selects. A descriptor
// list that ends before that descriptor, goes on past a descriptor
// without children, or selects nothing at some level gets none, and so
// does one that ends at a descriptor without a rate limit: then ok is
// false.
//
// Lookup answers what Envoy's service would, for tests of a rules file
// against Envoy's expectations and for tools; requests are decided by
// Checks, which derives the descriptor from the request (see the package
// documentation). Descriptors with a Match (a ratekit extension) are
// skipped: an entry list carries no method or path. Envoy's per-request
// limit override has no equivalent.
func (e *Engine) Lookup(domain string, entries ...Entry) (a Applied, ok bool) {
	s := e.cur.Load()
	if domain != s.cfg.Domain {
		return Applied{}, false
	}
	groups := s.groups
	var vals []string
	for i, en := range entries {
		n := find(groups, en)
		if n == nil {
			break
		}
		if n.dynamic {
			vals = append(vals, en.Value)
		}
		if i == len(entries)-1 && n.rl != nil {
			a = Applied{RateLimit: *n.rl, Shadow: n.shadow}
			if n.rule != nil && n.rule.lim != nil {
				a.Limit, a.Key = n.rule.limit.Name, joinKey(vals)
				a.Check = core.Check{Limiter: n.rule.lim, Key: a.Key}
			}
			return a, true
		}
		if len(n.groups) == 0 {
			break
		}
		groups = n.groups
	}
	return Applied{}, false
}

// find returns the descriptor among groups that entry en selects. A key
// other than generic_key has one group without a match per level, which
// chooses; generic_key has a group per value: the one with the entry's
// value, else the one without a value.
func find(groups []*group, en Entry) *node {
	var bare *node
	for _, g := range groups {
		switch {
		case g.key != en.Key || g.match != nil:
		case g.fn != nil:
			return g.choose(en.Value)
		case g.any.value == en.Value && en.Value != "":
			return g.any
		case g.any.value == "":
			bare = g.any
		}
	}
	return bare
}
