package answer

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/core"
)

// Header field names, in the canonical form of net/http.
const (
	HeaderLimit           = "X-Ratelimit-Limit"
	HeaderRemaining       = "X-Ratelimit-Remaining"
	HeaderReset           = "X-Ratelimit-Reset"
	HeaderRetryAfter      = "Retry-After"
	HeaderXRetryAfter     = "X-Ratelimit-Retry-After"
	HeaderRateLimit       = "Ratelimit"
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderSoft            = "X-Ratelimit-Soft"    // "true" on an admission by soft throttling
	HeaderElastic         = "X-Ratelimit-Elastic" // "true" on an admission beyond the limit by elastic throttling
)

// Fields appends to dst the header fields that describe d in style s, for
// a request passed on or rejected alike, and returns the extended slice.
// dst may be a buffer on the caller's stack ([8]Field is enough), so that
// a request that passes allocates nothing.
//
// All times are delta seconds, never epoch timestamps, rounded up.
// X-Ratelimit-Reset is the time until the key is back to its full quota.
// Retry-After and X-Ratelimit-Retry-After, sent only on rejections, are
// the time until a retry is admitted, at least 1. The IETF
// RateLimit-Policy field lists every limit of the request (the
// decision's Policies), whichever decided, so that it stays the same from
// one response to the next; the RateLimit field describes the limit that
// decided, and its t is the same moment as Retry-After on a rejection,
// and the time until the full quota is back on an admission. A decision
// without a quota (a block-list limit, a store failure) carries no count
// fields, only Retry-After when it rejects. An admission by soft throttling also
// gets X-Ratelimit-Soft: true, and one beyond the limit by elastic
// throttling X-Ratelimit-Elastic: true, in every style but NoHeaders.
//
// Numbers below 4096 come from a table, larger ones from the recent runs
// of consecutive numbers (bigNumber); the rest of a response's text (the
// IETF items, which carry the limit's name), if any, shares one
// allocation.
func (s Style) Fields(dst []Field, d *core.Decision) []Field {
	var b *block
	x := s == XRateLimit || s == Both
	large := s == IETF || s == Both
	if d.Quota > 0 && x {
		dst = append(dst,
			Field{HeaderLimit, number(&b, large, int64(d.Quota))},
			Field{HeaderRemaining, number(&b, large, int64(d.Remaining))},
			Field{HeaderReset, number(&b, large, ceilSeconds(d.ResetAfter))},
		)
	}
	if d.Quota > 0 && (s == IETF || s == Both) {
		t := ceilSeconds(d.ResetAfter)
		if !d.Allowed {
			t = retrySeconds(d)
		}
		dst = append(dst,
			Field{HeaderRateLimitPolicy, policies(&b, d)},
			Field{HeaderRateLimit, item(&b, d.Name, ";r=", int64(d.Remaining), ";t=", t)},
		)
	}
	if d.Soft && s != NoHeaders {
		dst = append(dst, Field{HeaderSoft, trueValue})
	}
	if d.Elastic && s != NoHeaders {
		dst = append(dst, Field{HeaderElastic, trueValue})
	}
	if !d.Allowed {
		retry := number(&b, large, retrySeconds(d))
		dst = append(dst, Field{HeaderRetryAfter, retry})
		if d.Quota > 0 && x {
			dst = append(dst, Field{HeaderXRetryAfter, retry})
		}
	}
	return dst
}

var trueValue = []string{"true"}

// A block holds the field values of one response that the table of small
// numbers cannot give, in one allocation made when the first is needed:
// a small one for numbers (X-Ratelimit fields), a larger one when the
// IETF fields, which carry the policy name, are sent.
type block struct {
	vals [6][1]string
	nv   int
	buf  []byte // in the array of smallBlock or largeBlock
}

type smallBlock struct {
	block
	arr [4 * 20]byte // four numbers of at most 20 digits
}

type largeBlock struct {
	block
	arr [384]byte // two items of a 64-byte name and two numbers, and two numbers
}

// number returns n as a field value: from the table when it is small,
// else from the recent runs. *pb is the response's block, allocated on
// first use, for numbers that no decision gives (negative, or beyond
// 2^62).
func number(pb **block, large bool, n int64) []string {
	if n >= 0 && n < smallInts {
		smallOnce.Do(buildSmall)
		return smallValues[n : n+1 : n+1]
	}
	if n >= 0 && n < 1<<62 {
		return bigNumber(n)
	}
	b := grab(pb, large)
	start := len(b.buf)
	b.buf = strconv.AppendInt(b.buf, n, 10)
	return b.value(start)
}

// A numberRun holds the field values of runLen consecutive numbers from
// first, formatted together in one allocation. It is never written once
// published.
type numberRun struct {
	first  int64
	vals   [runLen][1]string
	digits [runLen * 19]byte // 19: the digits of 2^62
}

// Numbers from smallInts up are formatted runLen at a time and kept in
// runSlots slots, by run: a limit's quota is the same number at every
// response, and a key's remaining count walks down one run at a time, so
// a hot key of a large quota costs one run (568 bytes) per runLen
// requests instead of an allocation per response, and quotas up to
// runSlots*runLen (16384) are answered from the slots once warm. Runs
// that share a slot replace each other; the slots hold at most 568 KiB.
const (
	runLen   = 16
	runSlots = 1024
)

var runs [runSlots]atomic.Pointer[numberRun]

// bigNumber returns n, from 0 to 2^62, as a field value from its run,
// which it formats when the run's slot holds another.
func bigNumber(n int64) []string {
	first := n - n%runLen
	slot := &runs[uint64(first/runLen)%runSlots]
	r := slot.Load()
	if r == nil || r.first != first {
		r = formatRun(first)
		slot.Store(r)
	}
	return r.vals[n-first][:]
}

// formatRun formats the run of runLen numbers from first.
func formatRun(first int64) *numberRun {
	r := &numberRun{first: first}
	b := r.digits[:0]
	for i := range runLen {
		start := len(b)
		b = strconv.AppendInt(b, first+int64(i), 10)
		r.vals[i][0] = unsafe.String(&b[start], len(b)-start)
	}
	return r
}

// policies returns the RateLimit-Policy field of d: its Policies, every
// limit of the request, when a limiter made it; otherwise (a decision
// made by hand) the item of the limit that decided.
func policies(pb **block, d *core.Decision) []string {
	if d.Policies == "" {
		return item(pb, d.Name, ";q=", int64(d.Quota), ";w=", ceilSeconds(d.Window))
	}
	b := grab(pb, true)
	v := b.vals[b.nv][:]
	b.nv++
	v[0] = d.Policies
	return v
}

// item returns the structured-field item `"name"<k1><v1><k2><v2>`.
func item(pb **block, name, k1 string, v1 int64, k2 string, v2 int64) []string {
	b := grab(pb, true)
	start := len(b.buf)
	b.buf = append(b.buf, '"')
	b.buf = append(b.buf, name...)
	b.buf = append(b.buf, '"')
	b.buf = append(b.buf, k1...)
	b.buf = strconv.AppendInt(b.buf, v1, 10)
	b.buf = append(b.buf, k2...)
	b.buf = strconv.AppendInt(b.buf, v2, 10)
	return b.value(start)
}

func grab(pb **block, large bool) *block {
	if *pb == nil {
		if large {
			l := new(largeBlock)
			l.buf = l.arr[:0]
			*pb = &l.block
		} else {
			sm := new(smallBlock)
			sm.buf = sm.arr[:0]
			*pb = &sm.block
		}
	}
	return *pb
}

// value returns buf[start:] as a one-element field value. The bytes are
// never written again: the block belongs to one response, and its buffer
// never grows past its array.
func (b *block) value(start int) []string {
	v := b.vals[b.nv][:]
	b.nv++
	v[0] = unsafe.String(&b.buf[start], len(b.buf)-start)
	return v
}

// retrySeconds is the Retry-After of a rejection in whole seconds:
// RetryAfter rounded up, at least 1.
func retrySeconds(d *core.Decision) int64 {
	return max(ceilSeconds(d.RetryAfter), 1)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	d = min(d, 1<<62) // keep d + 1s from overflowing
	return int64((d + time.Second - 1) / time.Second)
}

const smallInts = 4096

var (
	smallOnce   sync.Once
	smallValues []string
)

// buildSmall formats the numbers below smallInts, in one string.
func buildSmall() {
	var digits []byte
	ends := make([]int, smallInts)
	for i := 0; i < smallInts; i++ {
		digits = strconv.AppendInt(digits, int64(i), 10)
		ends[i] = len(digits)
	}
	all := string(digits)
	smallValues = make([]string, smallInts)
	start := 0
	for i, end := range ends {
		smallValues[i] = all[start:end]
		start = end
	}
}
