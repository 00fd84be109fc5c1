package replay

import (
	"container/heap"
	"io"
	"math/rand/v2"
	"strconv"
)

// The synthetic trace: SyntheticClients clients for SyntheticMinutes
// minutes, measured against a limit of 100 per minute. Three in four are
// steady (Poisson arrivals at 30 to 95 per minute), one in five bursty
// (20 per minute, plus a burst of 60 to 140 requests within 5 to 20
// seconds every 5 minutes on average), one in twenty heavy (150 to 400
// per minute). Times have millisecond resolution, from 2023-11-14T22:13:20Z.
const (
	SyntheticClients = 2000
	SyntheticMinutes = 30
)

// Synthetic returns a JSON-lines log (Fields' default members) generated
// deterministically from seed: the same seed gives the same trace,
// byte for byte, on every platform and Go version (math/rand/v2's PCG).
// It is for measuring the algorithms on a documented trace:
//
//	go run ./cmd/ratekit replay -synthetic -algorithm sliding-window-counter -limit 100 -period 1m
func Synthetic(seed uint64) Input {
	return Input{
		Name: "synthetic(seed=" + strconv.FormatUint(seed, 10) + ")",
		Open: func() (io.ReadCloser, error) { return newTrace(seed), nil },
	}
}

const traceStart = int64(1_700_000_000_000) // ms

// A stream is one arrival process of one client.
type stream struct {
	client int
	next   int64 // ms
	kind   uint8 // steady (Poisson), bursty base, burst, heavy
	mean   float64
	left   int     // requests left in the current burst
	gap    float64 // mean gap within a burst, ms
}

const (
	kPoisson uint8 = iota
	kBurst
)

type streams []*stream

func (s streams) Len() int { return len(s) }
func (s streams) Less(i, j int) bool {
	if s[i].next != s[j].next {
		return s[i].next < s[j].next
	}
	return s[i].client < s[j].client
}
func (s streams) Swap(i, j int) { s[i], s[j] = s[j], s[i] }
func (s *streams) Push(x any)   { *s = append(*s, x.(*stream)) }
func (s *streams) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	return x
}

type trace struct {
	rng  *rand.Rand
	h    streams
	end  int64
	buf  []byte
	off  int
	done bool
}

func newTrace(seed uint64) *trace {
	t := &trace{rng: rand.New(rand.NewPCG(seed, 0x5eed)), end: traceStart + SyntheticMinutes*60_000}
	minute := 60_000.0
	for c := range SyntheticClients {
		u := t.rng.Float64()
		switch {
		case c%20 == 19: // heavy
			t.add(&stream{client: c, kind: kPoisson, mean: minute / (150 + 250*u)})
		case c%5 == 4: // bursty: a base rate and bursts
			t.add(&stream{client: c, kind: kPoisson, mean: minute / 20})
			b := &stream{client: c, kind: kBurst, mean: 5 * minute}
			t.burst(b)
			b.next = traceStart + int64(t.rng.ExpFloat64()*b.mean)
			heap.Push(&t.h, b)
		default: // steady
			t.add(&stream{client: c, kind: kPoisson, mean: minute / (30 + 65*u)})
		}
	}
	return t
}

// add pushes a Poisson stream at its first arrival.
func (t *trace) add(s *stream) {
	s.next = traceStart + int64(t.rng.ExpFloat64()*s.mean)
	heap.Push(&t.h, s)
}

// advance moves the earliest stream to its next arrival.
func (t *trace) advance(s *stream) {
	switch {
	case s.kind == kPoisson:
		s.next += 1 + int64(t.rng.ExpFloat64()*s.mean)
	case s.left > 0:
		s.left--
		s.next += 1 + int64(t.rng.ExpFloat64()*s.gap)
	default: // the burst is over: the next one
		t.burst(s)
		s.next += 1 + int64(t.rng.ExpFloat64()*s.mean)
	}
	heap.Fix(&t.h, 0)
}

// burst draws the size and pace of a burst stream's next burst.
func (t *trace) burst(s *stream) {
	n := 60 + t.rng.IntN(81)
	dur := 5000 + t.rng.Float64()*15000
	s.left, s.gap = n-1, dur/float64(n)
}

func (t *trace) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if t.off == len(t.buf) {
			if t.done || !t.fill() {
				t.done = true
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
		}
		c := copy(p[n:], t.buf[t.off:])
		n += c
		t.off += c
	}
	return n, nil
}

// fill formats the next line into t.buf.
func (t *trace) fill() bool {
	s := t.h[0]
	if s.next >= t.end {
		return false
	}
	at, c := s.next, s.client
	t.advance(s)
	b := append(t.buf[:0], `{"time":`...)
	b = strconv.AppendInt(b, at/1000, 10)
	b = append(b, '.')
	ms := at % 1000
	b = append(b, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	b = append(b, `,"remote_addr":"10.`...)
	b = strconv.AppendInt(b, int64(c>>16&255), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(c>>8&255), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(c&255), 10)
	b = append(b, `","method":"GET","path":"/api/items","status":200}`+"\n"...)
	t.buf, t.off = b, 0
	return true
}

func (t *trace) Close() error { return nil }
