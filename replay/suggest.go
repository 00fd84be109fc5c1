package replay

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/ratekit/ratekit/core"
)

// A search looks for the smallest count of one algorithm's limit that
// meets one target, by replaying candidates: hi is the smallest count
// that met, lo the largest below it that missed. Before they are
// replayed, they are hints (from the clients' measures); tried holds
// what was replayed.
type search struct {
	algo   core.Algorithm
	target string // "reject" or "limited"
	share  float64
	lo, hi int
	tried  map[int]outcome
	done   bool // core.MaxCount was replayed and missed: nothing higher to try
}

// outcome is what a candidate limit decided.
type outcome struct {
	requests, rejected int64
	clients, limited   int
}

func (s *search) meets(o outcome) bool {
	if s.target == "reject" {
		return float64(o.rejected) <= s.share*float64(o.requests)
	}
	return float64(o.limited) <= s.share*float64(o.clients)
}

// candidatesPerSearch is how many counts between lo and hi a search
// replays in one round.
const candidatesPerSearch = 6

// next returns the counts the search wants replayed, none when done:
// lo and hi until both are known, then candidates between them.
func (s *search) next() []int {
	if s.done {
		return nil
	}
	var c []int
	if _, ok := s.tried[s.hi]; !ok {
		c = append(c, s.hi)
	}
	if _, ok := s.tried[s.lo]; !ok && s.lo > 0 {
		c = append(c, s.lo)
	}
	if s.hi-s.lo <= 1 {
		return c
	}
	lo, hi := float64(s.lo), float64(s.hi)
	for j := 1; j <= candidatesPerSearch; j++ {
		var v int
		if hi > 4*(lo+1) { // far apart: spread geometrically
			v = int(math.Round((lo + 1) * math.Pow(hi/(lo+1), float64(j)/float64(candidatesPerSearch+1))))
		} else {
			v = s.lo + int(math.Round(float64(j)*(hi-lo)/float64(candidatesPerSearch+1)))
		}
		if v > s.lo && v < s.hi && !slices.Contains(c, v) {
			c = append(c, v)
		}
	}
	return c
}

// learn takes what replaying count n decided.
func (s *search) learn(n int, o outcome) {
	s.tried[n] = o
	if s.meets(o) {
		if _, ok := s.tried[s.hi]; !ok || n < s.hi {
			s.hi = n
		}
		if n <= s.lo { // the hint was too high
			s.lo = n / 2
		}
		return
	}
	if n >= s.hi { // the hint, or a count above it, missed: look higher
		if _, ok := s.tried[s.hi]; !ok || n > s.hi || !s.meets(s.tried[s.hi]) {
			if n >= core.MaxCount { // no limit can be higher: not met
				s.lo, s.hi, s.done = n, n, true
				return
			}
			s.lo, s.hi = n, min(2*n, core.MaxCount)
		}
		return
	}
	if n > s.lo {
		s.lo = n
	}
}

// suggest finds, per algorithm replayed and per target, the smallest
// limit count that meets the target when replayed, buckets with a burst
// of the count. Counts are exact for the limited-clients target of the
// window algorithms, computed from each client's measures and confirmed
// by replaying the count and the count less one; otherwise each round
// replays a few candidates between the largest count that missed and
// the smallest that met, until they are adjacent.
func suggest(ctx context.Context, o *Options, main *replayer, inputs []Input) ([]Suggestion, error) {
	t := main.tr
	period := o.Limits[0].Rate.Period
	peaks := t.sorted(func(c *tclient) int32 { return c.peak })
	fixed := t.sorted(func(c *tclient) int32 { return c.fixedMax })
	counter := t.sorted(func(c *tclient) int32 { return c.counter })

	logLimited := fewestOver(peaks, o.TargetLimited)
	fixedReject := fixedForReject(t, o.TargetReject)
	var searches []*search
	for _, l := range o.Limits {
		algo := l.Algorithm
		if algo == 0 {
			algo = core.DefaultAlgorithm
		}
		for _, tg := range []struct {
			name  string
			share float64
		}{{"reject", o.TargetReject}, {"limited", o.TargetLimited}} {
			if tg.share <= 0 {
				continue
			}
			s := &search{algo: algo, target: tg.name, share: tg.share, tried: map[int]outcome{}}
			// exact: a count computed from the clients' measures, which
			// the count less one misses; hint: a count near the answer.
			exact, hint := 0, fixedReject
			switch {
			case tg.name == "reject" && algo == core.FixedWindow:
				exact = fixedReject
			case tg.name == "limited" && algo == core.FixedWindow:
				exact = fewestOver(fixed, tg.share)
			case tg.name == "limited" && algo == core.SlidingWindowLog:
				exact = logLimited
			case tg.name == "limited" && algo == core.SlidingWindowCounter:
				exact = fewestOver(counter, tg.share)
			case tg.name == "limited": // a bucket of burst N admits what the log of N does, and often more
				hint = max(logLimited*9/10, 1)
			}
			if exact > 0 && !t.saturated {
				s.lo, s.hi = exact-1, exact
			} else {
				s.lo, s.hi = hint*85/100, hint*115/100+1
			}
			// Every count replayed must be a valid limit.
			s.hi = min(s.hi, core.MaxCount)
			s.lo = min(s.lo, s.hi-1)
			searches = append(searches, s)
		}
	}
	for round := 0; round < 12; round++ {
		want := map[core.Algorithm][]int{}
		for _, s := range searches {
			for _, n := range s.next() {
				if !slices.Contains(want[s.algo], n) {
					want[s.algo] = append(want[s.algo], n)
				}
			}
		}
		if len(want) == 0 {
			break
		}
		var specs []core.Limit
		for algo, ns := range want {
			for _, n := range ns {
				specs = append(specs, core.Limit{Name: "suggest", Algorithm: algo, Rate: core.Rate{Count: n, Period: period}})
			}
		}
		outs, err := replayAll(ctx, o, specs, inputs)
		if err != nil {
			return nil, err
		}
		for i, l := range specs {
			for _, s := range searches {
				if s.algo == l.Algorithm {
					s.learn(l.Rate.Count, outs[i])
				}
			}
		}
	}
	var out []Suggestion
	for _, s := range searches {
		sg := Suggestion{Algorithm: s.algo.String(), Target: s.target, Share: s.share, Period: period.String()}
		o, ok := s.tried[s.hi]
		if !ok || !s.meets(o) {
			sg.Note = fmt.Sprintf("the limits tried up to %d missed the target", s.hi)
			if s.done {
				sg.Note = fmt.Sprintf("even the largest limit, %d, missed the target", s.hi)
			}
			out = append(out, sg)
			continue
		}
		sg.Met, sg.Limit = true, s.hi
		if lo, ok := s.tried[s.lo]; ok && !s.meets(lo) {
			sg.Below = s.lo
		}
		if s.algo == core.TokenBucket || s.algo == core.LeakyBucket {
			sg.Burst = s.hi
		}
		sg.Requests, sg.Rejected, sg.RejectedShare = o.requests, o.rejected, share(o.rejected, o.requests)
		sg.Clients, sg.ClientsLimited, sg.LimitedShare = o.clients, o.limited, share(int64(o.limited), int64(o.clients))
		out = append(out, sg)
	}
	return out, nil
}

// fewestOver returns the smallest count n such that at most share of
// the clients have a value above n: the limit that limits at most that
// share, when value is the least limit that never limits the client.
func fewestOver(sorted []int32, share float64) int {
	k := int(math.Floor(share * float64(len(sorted)) * (1 + 1e-9))) // clients allowed over
	if k >= len(sorted) {
		return 1
	}
	return max(int(sorted[len(sorted)-1-k]), 1)
}

// fixedForReject returns the smallest fixed-window count that rejects at
// most share of the requests, computed from the windows' counts.
func fixedForReject(t *tracker, share float64) int {
	var total int64
	top := int32(1)
	for c, w := range t.fixedWindows {
		total += int64(c) * w
		top = max(top, c)
	}
	lo, hi := 0, int(top) // lo misses (or is 0), hi meets: it rejects nothing
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if float64(t.fixedRejected(int64(mid))) <= share*float64(total) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// replayAll replays the inputs through every spec, on up to GOMAXPROCS
// goroutines, each reading the inputs itself.
func replayAll(ctx context.Context, o *Options, specs []core.Limit, inputs []Input) ([]outcome, error) {
	groups := min(runtime.GOMAXPROCS(0), len(specs))
	outs := make([]outcome, len(specs))
	errs := make([]error, groups)
	var wg sync.WaitGroup
	for g := range groups {
		var idx []int
		var mine []core.Limit
		for i := g; i < len(specs); i += groups {
			idx = append(idx, i)
			mine = append(mine, specs[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := newReplayer(ctx, o, mine, false)
			if err == nil {
				err = r.pass(inputs)
			}
			if err != nil {
				errs[g] = err
				return
			}
			for j, ln := range r.lanes {
				outs[idx[j]] = outcome{requests: ln.requests, rejected: ln.rejected, clients: len(r.tr.keys), limited: ln.limited}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outs, nil
}
