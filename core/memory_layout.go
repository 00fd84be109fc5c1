package core

// This file holds where the state of each limit of a set lies in the
// memory store: in a slot of the table and in a cell of the sketch. It
// calls down into the algorithms and the log rings.

// A layout is where the state of each limit of a set lies: in a slot of
// the table, after the key's hash, and in a cell of the sketch. The
// functions of the table and the sketch that read a key's state take the
// layout of the limits they read it with: the deciding counter's, or, to
// tell whether a key can be dropped, the table's latest.
type layout struct {
	ps       []Params
	offs     []int // limit i's words are slot[offs[i]:offs[i+1]]; word 0 is the key's hash
	cellOffs []int // limit i's words are cell[cellOffs[i]:cellOffs[i+1]] in a sketch
	logs     bool  // a sliding window log that keeps state is among the limits
}

// newLayout returns the layout of the limits ps.
func newLayout(ps []Params) layout {
	lo := layout{ps: ps, offs: make([]int, len(ps)+1), cellOffs: cellOffsets(ps)}
	lo.offs[0] = 1 // word 0 is the key's hash
	for i := range ps {
		lo.offs[i+1] = lo.offs[i] + ps[i].width()
		lo.logs = lo.logs || ps[i].Algorithm == SlidingWindowLog && !ps[i].Block
	}
	return lo
}

// stride returns the words of a slot.
func (lo *layout) stride() int { return lo.offs[len(lo.ps)] }

// full reports whether slot w is back to full capacity under every limit.
func (lo *layout) full(w []int64, rs *rings, now int64) bool {
	for i := range lo.ps {
		if !lo.ps[i].full(w[lo.offs[i]:lo.offs[i+1]], rs, now) {
			return false
		}
	}
	return true
}

// moveRings moves the logs of slot w from one ring list to another,
// rewriting the slot's references.
func (lo *layout) moveRings(w []int64, from, to *rings) {
	for i := range lo.ps {
		if p := &lo.ps[i]; p.Algorithm == SlidingWindowLog && !p.Block {
			if r := from.get(w[lo.offs[i]]); r != nil {
				w[lo.offs[i]] = to.add(r)
			}
		}
	}
}

// cellOffsets returns where limit i's words are in a sketch cell,
// cell[offs[i]:offs[i+1]]: a bucket's one word, and two words for the
// windows and for a log (the window's index and its packed counts).
func cellOffsets(ps []Params) []int {
	offs := make([]int, len(ps)+1)
	for i := range ps {
		w := 0
		switch {
		case ps[i].Block:
		case ps[i].Emission != 0:
			w = 1
		default:
			w = 2
		}
		offs[i+1] = offs[i] + w
	}
	return offs
}
