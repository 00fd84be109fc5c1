package replay

import (
	"math"
	"testing"

	"github.com/ratekit/ratekit/core"
)

// The bucket of any time after the start is within the series, however
// far apart they are: int64's whole range once overflowed the index.
func TestSeriesBucketExtremes(t *testing.T) {
	for _, c := range []struct{ start, now int64 }{
		{math.MinInt64, math.MaxInt64}, {0, math.MaxInt64}, {-1 << 62, 1 << 62}, {0, maxTime}, {5, 5}, {5, 4},
	} {
		s := newSeries(c.start, 2)
		s.cols[0][s.bucket(c.start)]++
		i := s.bucket(c.now)
		if i < 0 || i >= maxBuckets || s.n > maxBuckets || s.width <= 0 {
			t.Fatalf("%d to %d: bucket %d, n %d, width %d", c.start, c.now, i, s.n, s.width)
		}
		s.cols[0][i]++
		var sum int64
		for _, v := range s.cols[0] {
			sum += v
		}
		if sum != 2 {
			t.Fatalf("%d to %d: counts %v", c.start, c.now, s.cols[0][:s.n])
		}
	}
}

// A queue's memory follows its entries: released when it empties,
// shrunk when its capacity exceeds four times what it holds.
func TestTimesMemory(t *testing.T) {
	var q times
	for i := range int64(10000) {
		q.push(i)
	}
	q.expire(9999)
	if q.len() != 0 || q.ts != nil {
		t.Fatalf("empty queue keeps cap %d", cap(q.ts))
	}
	for i := range int64(10000) {
		q.push(i)
	}
	q.expire(9989)
	if q.len() != 10 || cap(q.ts) > keptCap || q.ts[q.head] != 9990 {
		t.Fatalf("10 entries in cap %d", cap(q.ts))
	}
	for i := range int64(1000) {
		q.push(20000 + i)
		q.expire(20000 + i - 100)
		if cap(q.ts) > max(keptCap, 4*q.len()) {
			t.Fatalf("%d entries in cap %d", q.len(), cap(q.ts))
		}
	}
	q.push(1)
	for q.len() < maxTimes {
		q.push(1)
	}
	if !q.push(2) || q.len() != maxTimes {
		t.Fatal("a full queue does not say so")
	}
}

// A search whose limits all miss stops at core.MaxCount, never past it,
// and reports the target as not met.
func TestSearchClamped(t *testing.T) {
	miss := outcome{requests: 10, rejected: 10, clients: 1, limited: 1}
	s := &search{target: "reject", share: 0.01, lo: 1 << 29, hi: 1 << 30, tried: map[int]outcome{}}
	for round := 0; round < 10; round++ {
		next := s.next()
		if len(next) == 0 {
			break
		}
		for _, n := range next {
			if n < 1 || n > core.MaxCount {
				t.Fatalf("round %d: candidate %d", round, n)
			}
			s.learn(n, miss)
		}
	}
	if !s.done || s.hi != core.MaxCount || s.next() != nil {
		t.Fatalf("done %v, hi %d", s.done, s.hi)
	}
}

// The headroom limit is the product rounded up, but a product a float's
// error above a whole number is that number.
func TestHeadroomCount(t *testing.T) {
	for _, c := range []struct {
		peak     int
		headroom float64
		want     int
	}{
		{12, 1.5, 18}, {12, 1.3, 16}, {10, 1.1, 11}, {3, 1.1, 4}, {100, 1.15, 115}, {1, 1, 1}, {7, 2, 14},
		{core.MaxCount, 100, core.MaxCount},
	} {
		if got := headroomCount(c.peak, c.headroom); got != c.want {
			t.Errorf("%d x %g: %d, want %d", c.peak, c.headroom, got, c.want)
		}
	}
}
