package core

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HeaderStyle selects the rate-limit header fields of responses.
type HeaderStyle uint8

const (
	// XRateLimitHeaders sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset on every limited response, and Retry-After and
	// X-Ratelimit-Retry-After on rejections. The default.
	XRateLimitHeaders HeaderStyle = iota
	// IETFHeaders sends the fields of draft-ietf-httpapi-ratelimit-headers-11:
	// RateLimit-Policy and RateLimit, and Retry-After on rejections.
	IETFHeaders
	// BothHeaders sends the fields of both styles.
	BothHeaders
	// NoHeaders sends only Retry-After, on rejections.
	NoHeaders
)

// ParseHeaderStyle parses "x-ratelimit", "ietf", "both" or "none".
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	switch strings.ToLower(s) {
	case "x-ratelimit", "xratelimit", "":
		return XRateLimitHeaders, nil
	case "ietf":
		return IETFHeaders, nil
	case "both":
		return BothHeaders, nil
	case "none":
		return NoHeaders, nil
	}
	return 0, errors.New(`ratekit: unknown header style "` + s + `" (valid: x-ratelimit, ietf, both, none)`)
}

// Header field names, in the canonical form of net/http.
const (
	HeaderLimit           = "X-Ratelimit-Limit"
	HeaderRemaining       = "X-Ratelimit-Remaining"
	HeaderReset           = "X-Ratelimit-Reset"
	HeaderRetryAfter      = "Retry-After"
	HeaderXRetryAfter     = "X-Ratelimit-Retry-After"
	HeaderRateLimit       = "Ratelimit"
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderSoft            = "X-Ratelimit-Soft" // "true" on an admission by soft throttling
)

// A Header is one response header field. Value has exactly one element;
// it may be shared between responses and must not be modified.
type Header struct {
	Name  string
	Value []string
}

// AppendHeaders appends to dst the header fields that describe d in the
// limiter's header style, and returns the extended slice.
//
// All times are delta seconds, never epoch timestamps: X-Ratelimit-Reset
// and the IETF t= are the seconds until the key is back to full capacity,
// rounded up; Retry-After and X-Ratelimit-Retry-After, sent only on
// rejections, are the seconds until a retry is admitted, rounded up and at
// least 1. A decision made while the store failed (Limit 0) carries no
// count fields, only Retry-After when rejected. An admission by soft
// throttling (Decision.Soft) also gets X-Ratelimit-Soft: true, in every
// style but NoHeaders.
//
// With the default style and numbers below 4096, it allocates nothing:
// http.Header values can be assigned directly, h[f.Name] = f.Value.
func (l *Limiter) AppendHeaders(dst []Header, d Decision) []Header {
	counts := d.Limit > 0
	if counts && (l.headers == XRateLimitHeaders || l.headers == BothHeaders) {
		dst = append(dst,
			Header{HeaderLimit, l.limitValue(d.Limit)},
			Header{HeaderRemaining, intValue(int64(d.Remaining))},
			Header{HeaderReset, intValue(ceilSeconds(d.ResetAfter))},
		)
	}
	if counts && (l.headers == IETFHeaders || l.headers == BothHeaders) {
		dst = append(dst,
			Header{HeaderRateLimitPolicy, l.policyHdr},
			Header{HeaderRateLimit, []string{`"` + d.Name + `";r=` + strconv.Itoa(d.Remaining) +
				";t=" + strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)}},
		)
	}
	if d.Soft && l.headers != NoHeaders {
		dst = append(dst, Header{HeaderSoft, softValue})
	}
	if !d.Allowed {
		retry := intValue(RetryAfterSeconds(d))
		dst = append(dst, Header{HeaderRetryAfter, retry})
		if counts && (l.headers == XRateLimitHeaders || l.headers == BothHeaders) {
			dst = append(dst, Header{HeaderXRetryAfter, retry})
		}
	}
	return dst
}

var softValue = []string{"true"}

// limitValue returns the X-Ratelimit-Limit value of a decision: the value
// precomputed for the limit whose capacity it is, so that large limits
// cost no allocation.
func (l *Limiter) limitValue(n int) []string {
	for _, c := range l.limitHdr {
		if c.n == n {
			return c.value
		}
	}
	return intValue(int64(n))
}

// A countValue is a number and its header value.
type countValue struct {
	n     int
	value []string
}

// RetryAfterSeconds returns the Retry-After of a rejection in whole seconds:
// RetryAfter rounded up, at least 1.
func RetryAfterSeconds(d Decision) int64 {
	s := ceilSeconds(d.RetryAfter)
	if s < 1 {
		s = 1
	}
	return s
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > 1<<62 {
		d = 1 << 62 // keep d + 1s from overflowing
	}
	return int64((d + time.Second - 1) / time.Second)
}

// policyHeader formats the RateLimit-Policy field of the limits, such as
// "api";q=100;w=60.
func policyHeader(limits []Limit) string {
	var b strings.Builder
	for i, lim := range limits {
		p, _ := compile(lim)
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`"` + p.Name + `";q=` + strconv.FormatInt(p.capacity, 10))
		b.WriteString(";w=" + strconv.FormatInt(ceilSeconds(p.window()), 10))
	}
	return b.String()
}

// intValue returns n formatted as a one-element header value. Values below
// smallInts come from a table built once; larger ones are allocated.
func intValue(n int64) []string {
	if n >= 0 && n < smallInts {
		smallOnce.Do(buildSmall)
		return smallValues[n : n+1 : n+1]
	}
	return []string{strconv.FormatInt(n, 10)}
}

const smallInts = 4096

var (
	smallOnce   sync.Once
	smallValues []string
)

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

// ErrMissingKey is wrapped by key-function errors that mean the request
// does not carry the value its key is made of (no API-key header, no user
// in the context). Middleware answers them with 400 Bad Request.
var ErrMissingKey = errors.New("ratekit: request has no rate-limit key")

// ProblemContentType is the media type of the bodies of Rejection
// (RFC 9457 problem details).
const ProblemContentType = "application/problem+json"

// ProblemCacheControl is the Cache-Control of the responses that carry a
// body of Rejection. They must not be stored: RFC 6585 forbids caching a
// 429, and the other statuses describe the moment too.
const ProblemCacheControl = "no-store"

// Problem types of rejections, from the IETF rate-limit headers draft.
const (
	ProblemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

type problem struct {
	Type       string `json:"type,omitempty"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Rejection returns the status and problem-details body of a response that
// does not pass a request on: err is the error of a key function or of
// Limiter.TakeN, and d the decision (zero after a key-function error).
//
//   - a rejection by a limit: 429 Too Many Requests, problem type
//     quota-exceeded, with the limit's name and the retry delay;
//   - the store failed and the fail mode is closed: 503 Service Unavailable,
//     problem type temporary-reduced-capacity;
//   - a key function reported ErrMissingKey: 400 Bad Request;
//   - any other error: 500 Internal Server Error.
//
// The body never contains the client's key.
func Rejection(d Decision, err error) (status int, body []byte) {
	status = rejectionStatus(d, err)
	p := problem{}
	switch {
	case err == nil:
		p = problem{Type: ProblemQuotaExceeded, Status: http.StatusTooManyRequests,
			Detail: "rate limit exceeded; retry in " + strconv.FormatInt(RetryAfterSeconds(d), 10) + " s",
			Limit:  d.Name, RetryAfter: RetryAfterSeconds(d)}
	case errors.Is(err, ErrMissingKey):
		p = problem{Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, ErrCostExceedsLimit):
		p = problem{Status: http.StatusInternalServerError, Detail: "rate limit misconfigured"}
	case !d.Allowed && d.RetryAfter > 0:
		p = problem{Type: ProblemReducedCapacity, Status: http.StatusServiceUnavailable,
			Detail: "rate limiter unavailable", RetryAfter: RetryAfterSeconds(d)}
	default:
		p = problem{Status: http.StatusInternalServerError, Detail: "rate-limit key unavailable"}
	}
	p.Title = http.StatusText(p.Status)
	body, _ = json.Marshal(p)
	return status, append(body, '\n')
}

// rejectionStatus is the status of Rejection, without the body.
func rejectionStatus(d Decision, err error) int {
	switch {
	case err == nil:
		return http.StatusTooManyRequests
	case errors.Is(err, ErrMissingKey):
		return http.StatusBadRequest
	case errors.Is(err, ErrCostExceedsLimit):
		return http.StatusInternalServerError
	case !d.Allowed && d.RetryAfter > 0:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// NoDecision reports whether err, from Limiter.TakeN, means that no
// decision was taken because the request itself was unusable: an empty key
// (ErrMissingKey) or a cost out of range (ErrCostExceedsLimit). Middleware
// hands such errors to its error handler; a store failure, by contrast,
// comes with a decision that follows the fail mode.
func NoDecision(err error) bool {
	return err != nil && (errors.Is(err, ErrMissingKey) || errors.Is(err, ErrCostExceedsLimit))
}
