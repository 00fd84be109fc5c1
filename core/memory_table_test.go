package core

import (
	"math/rand"
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
