package replay

import (
	"math"
	"math/bits"
	"slices"
)

// times is a queue of timestamps, oldest first. Its memory follows what
// it holds: compacted when half is dropped, shrunk when its capacity
// exceeds four times its entries, released when it empties.
type times struct {
	ts   []int64
	head int
}

// maxTimes caps the entries of one queue: a client sending more than this
// in one period has its peak reported as at least this (Distribution.Saturated).
const maxTimes = 1 << 16

// keptCap is the capacity an empty or small queue keeps, to spare
// allocations to a client that sends steadily.
const keptCap = 64

func (q *times) len() int { return len(q.ts) - q.head }

// expire drops the entries at or before t.
func (q *times) expire(t int64) {
	for q.head < len(q.ts) && q.ts[q.head] <= t {
		q.head++
	}
	switch n := q.len(); {
	case n == 0 && cap(q.ts) > keptCap:
		q.ts, q.head = nil, 0
	case n == 0:
		q.ts, q.head = q.ts[:0], 0
	case cap(q.ts) > keptCap && cap(q.ts) > 4*n:
		q.ts, q.head = append(make([]int64, 0, max(2*n, keptCap)), q.ts[q.head:]...), 0
	}
}

// push appends t, dropping the oldest entry when full; it reports
// whether it had to.
func (q *times) push(t int64) (full bool) {
	if q.len() >= maxTimes {
		q.head++
		full = true
	}
	if q.head > 16 && q.head*2 >= len(q.ts) {
		n := copy(q.ts, q.ts[q.head:])
		q.ts, q.head = q.ts[:n], 0
	}
	q.ts = append(q.ts, t)
	return full
}

// A tracker knows the clients of one key space (all the flag-built lanes
// share one; each rule of a rules file has its own) and what each sent,
// whatever was admitted: the measures that choose a limit.
type tracker struct {
	period  int64 // the window the peaks are measured over, in ns
	ids     map[string]int32
	keys    []string
	clients []tclient
	// fixedWindows counts the (client, aligned window) pairs by the
	// requests sent in them: a fixed window of count N rejects exactly
	// sum over c > N of windows[c] x (c - N).
	fixedWindows map[int32]int64
	saturated    bool
}

type tclient struct {
	requests int64
	sent     times // within the last period
	peak     int32 // the most requests in any period-long interval
	win      int64 // the aligned window of cur
	cur      int32 // requests in window win
	prev     int32 // requests in window win-1
	fixedMax int32 // the most requests in one aligned window
	counter  int32 // the least sliding-window-counter limit never rejecting them
}

func newTracker(period int64) *tracker {
	return &tracker{period: period, ids: map[string]int32{}, fixedWindows: map[int32]int64{}}
}

// id returns the client index of key, adding it if new; fresh reports
// a new client, whose key the caller may then retain.
func (t *tracker) id(key string) (id int32, fresh bool) {
	if id, ok := t.ids[key]; ok {
		return id, false
	}
	id = int32(len(t.keys))
	t.ids[key] = id
	t.keys = append(t.keys, key)
	t.clients = append(t.clients, tclient{win: math.MinInt64})
	return id, true
}

// lookup returns the client index of key, adding it if new and fewer
// than max clients are tracked; false when it is new and the tracker is
// full.
func (t *tracker) lookup(key string, max int) (int32, bool) {
	if id, ok := t.ids[key]; ok {
		return id, true
	}
	if len(t.keys) >= max {
		return 0, false
	}
	id, _ := t.id(key)
	return id, true
}

// idBytes is lookup for a key still in the line buffer, returning
// untracked for a new key when the tracker is full.
func (t *tracker) idBytes(key []byte, max int) int32 {
	if id, ok := t.ids[string(key)]; ok {
		return id
	}
	id, ok := t.lookup(string(key), max)
	if !ok {
		return untracked
	}
	return id
}

// sent records a request of client id at time now (non-decreasing).
func (t *tracker) sent(id int32, now int64) {
	c := &t.clients[id]
	c.requests++
	c.sent.expire(now - t.period)
	if c.sent.push(now) {
		t.saturated = true
	}
	if n := int32(c.sent.len()); n > c.peak {
		c.peak = n
	}
	win := floorDiv(now, t.period)
	switch {
	case win == c.win:
	case win == c.win+1:
		t.fixedWindows[c.cur]++
		c.prev, c.cur, c.win = c.cur, 0, win
	default:
		if c.cur > 0 {
			t.fixedWindows[c.cur]++
		}
		c.prev, c.cur, c.win = 0, 0, win
	}
	// The sliding window counter admits this request, all before it
	// admitted, while cur + 1 + ceil(prev x (P - e) / P) <= N.
	elapsed := now - win*t.period
	need := int64(c.cur) + 1 + ceilMulDiv(int64(c.prev), t.period-elapsed, t.period)
	c.counter = max(c.counter, int32(min(need, math.MaxInt32)))
	c.cur++
	c.fixedMax = max(c.fixedMax, c.cur)
}

// finish counts the windows still open.
func (t *tracker) finish() {
	for i := range t.clients {
		if c := &t.clients[i]; c.cur > 0 {
			t.fixedWindows[c.cur]++
			c.cur = 0
		}
	}
}

// fixedRejected returns how many requests a fixed window of count n
// would have rejected.
func (t *tracker) fixedRejected(n int64) int64 {
	var r int64
	for c, w := range t.fixedWindows {
		if int64(c) > n {
			r += (int64(c) - n) * w
		}
	}
	return r
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c)) // b <= c: the quotient fits
	if r != 0 {
		q++
	}
	return int64(q)
}

// quantile returns the q-quantile (nearest rank) of sorted values.
func quantile(sorted []int32, q float64) int32 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// peaksSorted returns the clients' values picked by f, sorted.
func (t *tracker) sorted(f func(*tclient) int32) []int32 {
	v := make([]int32, len(t.clients))
	for i := range t.clients {
		v[i] = f(&t.clients[i])
	}
	slices.Sort(v)
	return v
}

// peak counts events per aligned second and keeps the busiest.
type peak struct {
	sec, n, max, at int64
}

func (p *peak) add(now int64) {
	s := floorDiv(now, 1e9)
	if s != p.sec || p.n == 0 {
		p.sec, p.n = s, 0
	}
	p.n++
	if p.n > p.max {
		p.max, p.at = p.n, s
	}
}

// series counts events in buckets of a width that doubles, merging
// pairs, whenever the time span would need more than maxBuckets.
type series struct {
	start, width int64
	n            int
	cols         [][]int64 // column 0: requests sent; then one per lane
}

const maxBuckets = 240

func newSeries(start int64, cols int) *series {
	s := &series{start: start, width: 1e9, cols: make([][]int64, cols)}
	for i := range s.cols {
		s.cols[i] = make([]int64, maxBuckets)
	}
	return s
}

// bucket returns the bucket of now, widening the buckets as needed. A
// time before start (none is: times never go back) is in the first
// bucket.
func (s *series) bucket(now int64) int {
	if now <= s.start {
		return 0
	}
	// In uint64, the difference of any two int64 times is exact, and
	// the doubled width stays below 2^58: it never overflows.
	d := uint64(now) - uint64(s.start)
	q := d / uint64(s.width)
	for q >= maxBuckets {
		for _, c := range s.cols {
			for j := 0; j < maxBuckets/2; j++ {
				c[j] = c[2*j] + c[2*j+1]
			}
			clear(c[maxBuckets/2:])
		}
		s.width *= 2
		s.n = (s.n + 1) / 2
		q = d / uint64(s.width)
	}
	i := int(min(q, maxBuckets-1))
	if i >= s.n {
		s.n = i + 1
	}
	return i
}
