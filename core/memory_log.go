package core

// This file holds the memory store's sliding window logs: the ring of
// each key's log, kept per shard and referred to by the key's state word.
// The log algorithm (takeLog), the table (eviction) and the sketch (a key
// it seeds) use them; they call nothing.

// rings holds the logs of one shard's keys; a key's state word is the
// index of its log plus one (0: none yet).
type rings struct{ list []*logRing }

func (rs *rings) get(ref int64) *logRing {
	if ref == 0 {
		return nil
	}
	return rs.list[ref-1]
}

func (rs *rings) add(r *logRing) int64 {
	rs.list = append(rs.list, r)
	return int64(len(rs.list))
}

// logRing is the state of a sliding window log: the admitted requests
// still inside the window, oldest first, in a ring, one entry per request
// (the requests of one instant share an entry), so that its memory is
// bounded by requests, not by their costs: a request of cost 2^31-1 is one
// entry. The costs are kept only once a request costs more than 1.
type logRing struct {
	ts    []int64 // the entries' times
	costs []int32 // the entries' costs; nil while every entry costs 1
	head  int
	n     int   // entries
	used  int64 // the sum of their costs
}

func (r *logRing) at(i int) int64 { return r.ts[(r.head+i)%len(r.ts)] }

func (r *logRing) cost(i int) int64 {
	if r.costs == nil {
		return 1
	}
	return int64(r.costs[(r.head+i)%len(r.ts)])
}

// expiring returns the time of the entry whose expiry brings the cost
// logged down by at least need (need <= used).
func (r *logRing) expiring(need int64) int64 {
	if r.costs == nil {
		return r.at(int(need - 1))
	}
	for i := 0; ; i++ {
		if need -= r.cost(i); need <= 0 || i == r.n-1 {
			return r.at(i)
		}
	}
}

// expire drops the entries that are out of the window ending at now.
func (r *logRing) expire(now, period int64) {
	for r.n > 0 && r.ts[r.head] <= now-period {
		r.used -= r.cost(0)
		r.head = (r.head + 1) % len(r.ts)
		r.n--
	}
	if r.n == 0 {
		r.head, r.used = 0, 0
	}
}

// push logs a request of the given cost at time t, no earlier than the
// newest entry; limit bounds the entries, as it bounds their costs.
func (r *logRing) push(t, cost, limit int64) {
	if r.n > 0 && r.at(r.n-1) == t {
		r.setCost(r.n-1, r.cost(r.n-1)+cost)
		r.used += cost
		return
	}
	if r.n == len(r.ts) {
		size := min(max(2*len(r.ts), 4), int(limit))
		ts := make([]int64, size)
		var costs []int32
		if r.costs != nil {
			costs = make([]int32, size)
		}
		for i := 0; i < r.n; i++ {
			ts[i] = r.at(i)
			if costs != nil {
				costs[i] = int32(r.cost(i))
			}
		}
		r.ts, r.costs, r.head = ts, costs, 0
	}
	r.n++
	r.ts[(r.head+r.n-1)%len(r.ts)] = t
	r.setCost(r.n-1, cost)
	r.used += cost
}

// setCost sets the cost of entry i, keeping costs from its first entry
// above 1.
func (r *logRing) setCost(i int, cost int64) {
	if r.costs == nil {
		if cost == 1 {
			return
		}
		r.costs = make([]int32, len(r.ts))
		for j := range r.costs {
			r.costs[j] = 1
		}
	}
	r.costs[(r.head+i)%len(r.ts)] = int32(cost)
}

// remove takes back cost logged at time t (a refund), from the newest
// entries of that instant, keeping the order of the others.
func (r *logRing) remove(t, cost int64) {
	for i := r.n - 1; i >= 0 && cost > 0; i-- {
		if r.at(i) != t {
			continue
		}
		take := min(cost, r.cost(i))
		cost -= take
		r.used -= take
		r.setCost(i, r.cost(i)-take)
	}
	out := 0
	for i := 0; i < r.n; i++ {
		if c := r.cost(i); c > 0 {
			r.ts[(r.head+out)%len(r.ts)] = r.at(i)
			if r.costs != nil {
				r.costs[(r.head+out)%len(r.ts)] = int32(c)
			}
			out++
		}
	}
	r.n = out
	if r.n == 0 {
		r.head, r.used = 0, 0
	}
}
