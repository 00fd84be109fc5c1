package replay

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

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

// outcome is what a candidate limit decided: in all, and for the
// outliers (see NormalClients), the first few of them one by one.
type outcome struct {
	requests, rejected int64
	clients, limited   int
	normalLimited      int
	outliersRejected   int64
	listed             []int64 // rejected, per listed outlier
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

// suggest finds, per algorithm replayed, the limits asked for, each
// replayed, and tells the normal clients from the outliers.
//
// For a target, it finds the smallest limit count that meets it when
// replayed, buckets with a burst of the count. Counts are exact for the
// limited-clients target of the window algorithms, computed from each
// client's measures and confirmed by replaying the count and the count
// less one; otherwise each round replays a few candidates between the
// largest count that missed and the smallest that met, until they are
// adjacent.
//
// For Options.Headroom, the count is the busiest normal client's peak
// times Headroom, rounded up (headroomCount), replayed once per
// algorithm in the first round.
func suggest(ctx context.Context, o *Options, main *replayer, inputs []Input) ([]Suggestion, *NormalClients, error) {
	t := main.tr
	period := o.Limits[0].Rate.Period
	peaks := t.sorted(func(c *tclient) int32 { return c.peak })
	fixed := t.sorted(func(c *tclient) int32 { return c.fixedMax })
	counter := t.sorted(func(c *tclient) int32 { return c.counter })
	normal, outliers := classify(main, peaks, o.OutlierFactor)
	outlierKeys := make([]string, len(outliers))
	for i, id := range outliers {
		outlierKeys[i] = t.keys[id]
	}

	logLimited := fewestOver(peaks, o.TargetLimited)
	fixedReject := fixedForReject(t, o.TargetReject)
	var searches []*search
	algos := make([]core.Algorithm, len(o.Limits)) // per limit
	perLimit := make([]int, len(o.Limits))         // searches per limit, in order
	for i, l := range o.Limits {
		algo := l.Algorithm
		if algo == 0 {
			algo = core.DefaultAlgorithm
		}
		algos[i] = algo
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
			perLimit[i]++
		}
	}
	// The headroom limits are replayed in the first round, apart from
	// the searches: their specs are named headroomSpec.
	headroom := map[core.Algorithm]outcome{}
	var headroomSpecs []core.Limit
	if o.Headroom > 0 {
		n := headroomCount(normal.BusiestPeak, o.Headroom)
		for i, algo := range algos {
			if slices.Contains(algos[:i], algo) {
				continue
			}
			headroomSpecs = append(headroomSpecs, core.Limit{Name: headroomSpec, Algorithm: algo, Rate: core.Rate{Count: n, Period: period}})
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
		var specs []core.Limit
		if round == 0 {
			specs = headroomSpecs
		}
		if len(want) == 0 && len(specs) == 0 {
			break
		}
		for algo, ns := range want {
			for _, n := range ns {
				specs = append(specs, core.Limit{Name: "suggest", Algorithm: algo, Rate: core.Rate{Count: n, Period: period}})
			}
		}
		outs, err := replayAll(ctx, o, specs, inputs, outlierKeys)
		if err != nil {
			return nil, nil, err
		}
		for i, l := range specs {
			if l.Name == headroomSpec {
				headroom[l.Algorithm] = outs[i]
				continue
			}
			for _, s := range searches {
				if s.algo == l.Algorithm {
					s.learn(l.Rate.Count, outs[i])
				}
			}
		}
	}
	// Per limit, in order: its searches, then its algorithm's headroom
	// limit (once per algorithm).
	var out []Suggestion
	next := 0
	for i, algo := range algos {
		for _, s := range searches[next : next+perLimit[i]] {
			sg := Suggestion{Algorithm: s.algo.String(), Target: s.target, Share: s.share, Period: period.String()}
			oc, ok := s.tried[s.hi]
			if !ok || !s.meets(oc) {
				sg.Note = fmt.Sprintf("the limits tried up to %d missed the target", s.hi)
				if s.done {
					sg.Note = fmt.Sprintf("even the largest limit, %d, missed the target", s.hi)
				}
				out = append(out, sg)
				continue
			}
			if lo, ok := s.tried[s.lo]; ok && !s.meets(lo) {
				sg.Below = s.lo
			}
			out = append(out, main.replayed(sg, s.algo, s.hi, oc, normal, outliers))
		}
		next += perLimit[i]
		if oc, ok := headroom[algo]; ok && !slices.Contains(algos[:i], algo) {
			sg := Suggestion{Algorithm: algo.String(), Target: "headroom", Headroom: o.Headroom, Period: period.String()}
			out = append(out, main.replayed(sg, algo, headroomSpecs[0].Rate.Count, oc, normal, outliers))
		}
	}
	return out, normal, nil
}

// headroomSpec names the specs of the headroom limits among those a
// round replays.
const headroomSpec = "headroom"

// maxListedOutliers is how many outliers, the busiest, a suggestion
// details one by one.
const maxListedOutliers = 5

// headroomCount returns the headroom limit: peak times headroom,
// rounded up, from 1 to core.MaxCount. A billionth is taken off the
// product first, so that 10 x 1.1, 11.000000000000002 in floating
// point, is 11, not 12.
func headroomCount(peak int, headroom float64) int {
	v := math.Ceil(float64(peak)*headroom - 1e-9)
	return int(min(max(v, 1), core.MaxCount))
}

// classify tells the normal clients from the outliers (NormalClients),
// and returns the outliers, the highest peak first (then the most
// requests, then the first seen). Peaks are from the sorted peaks of
// the tracker's clients. The busiest normal client is the first seen
// of those with the highest peak.
func classify(r *replayer, peaks []int32, factor float64) (*NormalClients, []int32) {
	t := r.tr
	if factor == 0 {
		factor = DefaultOutlierFactor
	}
	median := quantile(peaks, 0.5)
	// Peaks are at most maxTimes: a bound beyond it leaves none out.
	above := int(min(math.Floor(factor*float64(median)), 2*maxTimes))
	n := &NormalClients{Period: time.Duration(t.period).String(), MedianPeak: int(median), Factor: factor, OutlierAbove: above}
	var outliers []int32
	var total int64
	busiest := int32(-1)
	for i := range t.clients {
		c, id := &t.clients[i], int32(i)
		total += c.requests
		if int(c.peak) > above {
			outliers = append(outliers, id)
			n.OutlierRequests += c.requests
			continue
		}
		n.Clients++
		if busiest < 0 || c.peak > t.clients[busiest].peak {
			busiest = id
		}
	}
	slices.SortFunc(outliers, func(a, b int32) int {
		ca, cb := &t.clients[a], &t.clients[b]
		switch {
		case ca.peak != cb.peak:
			return cmp.Compare(cb.peak, ca.peak)
		case ca.requests != cb.requests:
			return cmp.Compare(cb.requests, ca.requests)
		}
		return cmp.Compare(a, b)
	})
	n.Outliers = len(outliers)
	n.OutlierShare = share(n.OutlierRequests, total)
	if busiest >= 0 { // the median client is normal: there is one when there are clients
		n.BusiestPeak, n.BusiestClient = int(t.clients[busiest].peak), r.keyName(t, busiest)
	}
	return n, outliers
}

// replayed completes sg, a suggestion of count n for algo, with what
// replaying it decided, oc.
func (r *replayer) replayed(sg Suggestion, algo core.Algorithm, n int, oc outcome, normal *NormalClients, outliers []int32) Suggestion {
	t := r.tr
	sg.Met, sg.Limit = true, n
	if algo == core.TokenBucket || algo == core.LeakyBucket {
		sg.Burst = n
	}
	sg.Requests, sg.Rejected, sg.RejectedShare = oc.requests, oc.rejected, share(oc.rejected, oc.requests)
	sg.Clients, sg.ClientsLimited, sg.LimitedShare = oc.clients, oc.limited, share(int64(oc.limited), int64(oc.clients))
	sg.BusiestNormal, sg.NormalClients, sg.NormalLimited = normal.BusiestPeak, normal.Clients, oc.normalLimited
	sg.OutliersRejected = oc.outliersRejected
	for k, id := range outliers[:len(oc.listed)] {
		c := &t.clients[id]
		sg.Outliers = append(sg.Outliers, Outlier{
			Key: r.keyName(t, id), Peak: int(c.peak), Requests: c.requests,
			Share: share(c.requests, oc.requests), Rejected: oc.listed[k],
		})
	}
	return sg
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
// goroutines, each reading the inputs itself. The outcomes count what
// each spec did to the outliers, by key, and list the first
// maxListedOutliers of them one by one.
func replayAll(ctx context.Context, o *Options, specs []core.Limit, inputs []Input, outliers []string) ([]outcome, error) {
	groups := min(runtime.GOMAXPROCS(0), len(specs))
	outs := make([]outcome, len(specs))
	errs := make([]error, groups)
	listed := min(len(outliers), maxListedOutliers)
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
				oc := outcome{requests: ln.requests, rejected: ln.rejected, clients: len(r.tr.keys), limited: ln.limited,
					normalLimited: ln.limited, listed: make([]int64, listed)}
				for k, key := range outliers {
					id, ok := r.tr.ids[key]
					if !ok || int(id) >= len(ln.rej) || ln.rej[id] == 0 {
						continue
					}
					oc.normalLimited--
					oc.outliersRejected += int64(ln.rej[id])
					if k < listed {
						oc.listed[k] = int64(ln.rej[id])
					}
				}
				outs[idx[j]] = oc
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
