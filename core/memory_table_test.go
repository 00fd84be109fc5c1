package core

import (
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// Seeding a log of count 1 from cells that hold a count in each window
// (two keys settled into them) keeps the ring within its count.
func TestSeedLogWithinCount(t *testing.T) {
	clk := &fixedClock{time.Unix(1_700_000_000, 0).Add(30 * time.Second)}
	s := &MemoryStore{Shards: 1, MaxKeys: 1, Clock: clk.Now}
	c, _ := s.bind([]Limit{{Rate: PerMinute(1), Algorithm: SlidingWindowLog}})
	now := s.now()
	sh := &c.t.shards[0]
	sh.sketch = newSketch(&c.layout, c.t.maxShard)
	p := &c.ps[0]
	// a cell state with prev=1 and cur=1 (two keys settled into one cell)
	win := floorDiv(now+p.shift, p.Period)
	for r := 0; r < 2; r++ {
		for j := 0; j < sh.sketch.width; j++ {
			cell := sh.sketch.cells[(r*sh.sketch.width+j)*sh.sketch.stride:]
			cell[0], cell[1] = win, pack(1, 1)
		}
	}
	w := make([]int64, c.t.stride)
	w[1] = sh.rings.add(&logRing{}) // as acquire does
	sh.sketch.seed(&c.layout, &sh.rings, 12345, now, w)
	r := sh.rings.get(w[1])
	if r.n > len(r.ts) || r.used > p.Count {
		t.Errorf("ring holds %d entries costing %d in %d slots", r.n, r.used, len(r.ts))
	}
}

// logEntry is an entry of the reference model of a log ring.
type logEntry struct{ t, c int64 }

// The log ring against a reference model, over random pushes (merged at
// one instant), expiries and refunds: the same entries, costs and total.
func TestLogRingModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 3000; iter++ {
		limit := int64(1 + rng.Intn(12))
		period := int64(1 + rng.Intn(20))
		var r logRing
		var m []logEntry
		now := int64(100)
		for step := 0; step < 200; step++ {
			now += int64(rng.Intn(3))
			// expire
			r.expire(now, period)
			k := 0
			for k < len(m) && m[k].t <= now-period {
				k++
			}
			m = m[k:]
			var used int64
			for _, e := range m {
				used += e.c
			}
			if used != r.used || len(m) != r.n {
				t.Fatalf("iter %d step %d: used %d/%d n %d/%d", iter, step, r.used, used, r.n, len(m))
			}
			for i, e := range m {
				if r.at(i) != e.t || r.cost(i) != e.c {
					t.Fatalf("iter %d step %d entry %d: (%d,%d) want (%d,%d)", iter, step, i, r.at(i), r.cost(i), e.t, e.c)
				}
			}
			switch rng.Intn(3) {
			case 0, 1:
				cost := int64(1 + rng.Intn(3))
				if rng.Intn(2) == 0 {
					cost = 1
				}
				if used+cost <= limit {
					r.push(now, cost, limit, nil)
					if len(m) > 0 && m[len(m)-1].t == now {
						m[len(m)-1].c += cost
					} else {
						m = append(m, logEntry{now, cost})
					}
				}
			case 2:
				if len(m) == 0 {
					continue
				}
				e := m[rng.Intn(len(m))]
				cost := int64(1 + rng.Intn(int(e.c)))
				r.remove(e.t, cost)
				for i := len(m) - 1; i >= 0; i-- {
					if m[i].t == e.t {
						m[i].c -= cost
						if m[i].c == 0 {
							m = append(m[:i], m[i+1:]...)
						}
						break
					}
				}
			}
		}
	}
}

// A decision on a key the table holds takes no shard-wide lock: it is
// taken while another goroutine holds the lock of the key's shard (as an
// insertion or a rebuild would). Under a shard-wide lock per decision, the
// decision would wait for it and the test would time out.
func TestTrackedKeyDecidedWithoutShardLock(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindowCounter} {
		s := &MemoryStore{Shards: 1}
		c, err := s.bind([]Limit{{Rate: PerMinute(10), Algorithm: alg}})
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		c.decideOne("k", 1, true, &d) // inserts k, under the shard's lock
		sh := &c.t.shards[0]
		sh.mu.Lock()
		done := make(chan Decision)
		go func() {
			var d Decision
			c.decideOne("k", 1, true, &d)
			done <- d
		}()
		select {
		case d = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: the decision of a tracked key waited for its shard's lock", alg)
		}
		sh.mu.Unlock()
		if !d.Allowed || d.Remaining != 8 {
			t.Errorf("%v: second request: allowed %v, remaining %d; want true, 8", alg, d.Allowed, d.Remaining)
		}
	}
}

// A window later than now's, written by a decision that read the clock
// later and took the key first, is still counting: a rebuild at now must
// not drop the key.
func TestLaterWindowIsNotFull(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindowCounter} {
		p, err := Limit{Rate: PerMinute(10), Algorithm: alg}.Params(time.Nanosecond)
		if err != nil {
			t.Fatal(err)
		}
		now := origin
		win := floorDiv(now+p.shift, p.Period)
		for _, later := range []int64{win + 1, win + 2} {
			w := []int64{later, pack(3, 0)}
			if p.full(w, nil, now) {
				t.Errorf("%v: a count of 3 in window %d is full at window %d", alg, later, win)
			}
		}
	}
}

// Decisions on tracked keys, concurrent with insertions that rebuild
// their shard again and again, lose no count: each of the hot keys admits
// exactly its limit.
func TestDecisionsExactAcrossRebuilds(t *testing.T) {
	const limit, hot, workers = 500, 4, 4
	s := &MemoryStore{Shards: 1}
	c, err := s.bind([]Limit{{Rate: Rate{Count: limit, Period: time.Hour}, Algorithm: SlidingWindowCounter}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	admitted := make([]atomic.Int64, hot)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2*limit; i++ {
				var d Decision
				k := i % hot
				c.decideOne("hot"+strconv.Itoa(k), 1, true, &d)
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // new keys: the shard grows, rebuilt each time it is 4/5 full
		defer wg.Done()
		for i := 0; i < 4000; i++ {
			var d Decision
			c.decideOne("new"+strconv.Itoa(i), 1, true, &d)
		}
	}()
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != limit {
			t.Errorf("hot%d: %d admitted, want %d", k, got, limit)
		}
	}
}

// Many decisions on one hot key, more than the cores, wait for its slot
// (spinning, then queued on the shard's mutex) while insertions rebuild
// the shard: the key admits exactly its limit, and no waiter is left
// behind (the test would hang).
func TestHotKeyWaitersExact(t *testing.T) {
	const limit, workers = 2000, 32
	s := &MemoryStore{Shards: 1}
	c, err := s.bind([]Limit{{Rate: Rate{Count: limit, Period: time.Hour}, Algorithm: FixedWindow}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2*limit/workers; i++ {
				var d Decision
				c.decideOne("hot", 1, true, &d)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			var d Decision
			c.decideOne("new"+strconv.Itoa(i), 1, true, &d)
		}
	}()
	wg.Wait()
	if got := admitted.Load(); got != limit {
		t.Errorf("%d admitted, want %d", got, limit)
	}
}
