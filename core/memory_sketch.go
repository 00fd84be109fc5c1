package core

// This file holds the memory store's sketch. The table calls it; it calls
// down into the log rings and the window arithmetic, nothing else.

// A sketch counts the keys that a shard at its key cap has no room for, in
// the manner of a count-min sketch with conservative update: sketchRows
// rows of cells, each cell a key's state under every limit of the set. A
// key maps to one cell per row, by its hash (seeded per table, so clients
// cannot aim for a cell). Its state is read as the least-used of its cells
// (the earliest bucket, the lowest counts), and a request it admits raises
// each of its cells to at least the key's new state, never lower.
//
// Every cell therefore stays at least as used as each key that maps to it,
// and a key's estimate is at least its own use: a collision can only make
// limiting stricter, never looser. A flood of F new keys raises each cell
// by about F/width per window, so a newcomer is disturbed in proportion to
// the flood spread over the cells, not limited together with the flood as
// one client.
//
// A sliding window log has no room in a cell for its entries: there it is
// counted as the counts of the current window and the one before, which
// admit a request only if the log would (see takeLogPair).
type sketch struct {
	width   int     // cells per row
	stride  int     // words per cell
	cells   []int64 // sketchRows x width cells
	scratch []int64 // the slot of the key being decided: its estimate

	estimates int64 // the decisions made in the sketch, for tests
}

// sketchRows is the number of cells a key maps to.
const sketchRows = 2

// sketchWidth returns the cells per row of a shard with a key cap of
// maxShard: a quarter of the cap, at least 64 and at most 65536.
func sketchWidth(maxShard int) int { return min(max(64, maxShard/4), 1<<16) }

// newSketch returns the sketch of a shard with a key cap of maxShard for
// the limits of lo.
func newSketch(lo *layout, maxShard int) *sketch {
	width, stride := sketchWidth(maxShard), lo.cellOffs[len(lo.ps)]
	return &sketch{
		width:   width,
		stride:  stride,
		cells:   make([]int64, sketchRows*width*stride),
		scratch: make([]int64, lo.stride()),
	}
}

// cell returns the cell of key hash h in row r.
func (sk *sketch) cell(r int, h uint64) []int64 {
	x := uint32(h)
	if r > 0 {
		x = uint32((h * 0x9e3779b97f4a7c15) >> 32)
	}
	i := (r*sk.width + int(uint64(x)*uint64(sk.width)>>32)) * sk.stride
	return sk.cells[i : i+sk.stride]
}

// estimate writes to the sketch's scratch slot the state of key hash h at
// time now under the limits of lo, the least used of its cells under each
// limit, and returns it. A log's word in the slot is its counts, packed
// (takeLogPair).
func (sk *sketch) estimate(lo *layout, h uint64, now int64) []int64 {
	w := sk.scratch
	w[0] = int64(h)
	sk.estimates++
	for i := range lo.ps {
		p, st := &lo.ps[i], w[lo.offs[i]:lo.offs[i+1]]
		a := sk.cell(0, h)[lo.cellOffs[i]:lo.cellOffs[i+1]]
		b := sk.cell(1, h)[lo.cellOffs[i]:lo.cellOffs[i+1]]
		switch {
		case p.Block:
		case p.Emission != 0:
			st[0] = min(a[0], b[0])
		default:
			win := floorDiv(now+p.shift, p.Period)
			ac, ap := roll(a, win)
			bc, bp := roll(b, win)
			packed := pack(min(ac, bc), min(ap, bp))
			if p.Algorithm == SlidingWindowLog {
				st[0] = packed
			} else {
				st[0], st[1] = win, packed
			}
		}
	}
	return w
}

// settle raises each cell of key hash h to at least the key's state in
// the scratch slot, after a decision at time now under the limits of lo
// counted it there.
func (sk *sketch) settle(lo *layout, h uint64, now int64) {
	w := sk.scratch
	for r := range sketchRows {
		cell := sk.cell(r, h)
		for i := range lo.ps {
			p, st, x := &lo.ps[i], w[lo.offs[i]:lo.offs[i+1]], cell[lo.cellOffs[i]:lo.cellOffs[i+1]]
			switch {
			case p.Block:
			case p.Emission != 0:
				x[0] = max(x[0], st[0])
			default:
				win := floorDiv(now+p.shift, p.Period)
				var cur, prev int64
				if p.Algorithm == SlidingWindowLog {
					cur, prev = unpack(st[0])
				} else {
					cur, prev = roll(st, win)
				}
				xc, xp := roll(x, win)
				x[0], x[1] = win, pack(max(xc, cur), max(xp, prev))
			}
		}
	}
}

// seed starts the slot w of key hash h, newly tracked, from the key's
// estimate in the sketch, so that a key that was counted there keeps what
// it used. A log starts with the counts of its two windows as two entries
// that expire no earlier than the requests they stand for: the previous
// window's at the start of the current one, the current one's now; its
// ring goes to rs, the shard's.
func (sk *sketch) seed(lo *layout, rs *rings, h uint64, now int64, w []int64) {
	est := sk.estimate(lo, h, now)
	for i := range lo.ps {
		p := &lo.ps[i]
		switch {
		case p.Block:
		case p.Algorithm == SlidingWindowLog:
			// A log never holds more than its count: keep the current
			// window's requests first (they expire last), then what of
			// the previous window's fits. The key's own log, never over
			// the count, is no fuller at any later time.
			cur, prev := unpack(est[lo.offs[i]])
			cur = min(cur, p.Count)
			prev = min(prev, p.Count-cur)
			if cur+prev == 0 {
				continue
			}
			r := &logRing{}
			if prev > 0 {
				r.push(floorDiv(now+p.shift, p.Period)*p.Period-p.shift, prev, p.Count)
			}
			if cur > 0 {
				r.push(now, cur, p.Count)
			}
			w[lo.offs[i]] = rs.add(r)
		default:
			copy(w[lo.offs[i]:lo.offs[i+1]], est[lo.offs[i]:lo.offs[i+1]])
		}
	}
}

// idle reports whether every cell is back to full capacity at time now
// under the limits of lo, so that the sketch can be dropped without
// changing any decision.
func (sk *sketch) idle(lo *layout, now int64) bool {
	for j := 0; j < len(sk.cells); j += sk.stride {
		cell := sk.cells[j : j+sk.stride]
		for i := range lo.ps {
			p, x := &lo.ps[i], cell[lo.cellOffs[i]:lo.cellOffs[i+1]]
			switch {
			case p.Block:
			case p.Emission != 0:
				if x[0] > now {
					return false
				}
			default:
				cur, prev := roll(x, floorDiv(now+p.shift, p.Period))
				if cur != 0 || prev != 0 {
					return false
				}
			}
		}
	}
	return true
}
