// Package answer is what ratekit says to a client: the rate-limit header
// fields of a decision, in one of four styles, and the problem-details
// body (RFC 9457) of a request that is not passed on. Every middleware
// answers through it (by way of package adapter), so all of them answer a
// request alike, byte for byte.
//
// Applications meet this package for its Style constants, which select the
// header fields (WithHeaders in every adapter), and for the header names
// when they write their own rejection handler. Adapter authors reach it
// through package adapter, which decides and then asks Style.Fields and
// Problem for the words.
package answer

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/ratekit/ratekit/core"
)

// Style selects the rate-limit header fields of responses.
type Style uint8

const (
	// XRateLimit sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset on every limited response, and Retry-After and
	// X-Ratelimit-Retry-After on rejections. The default.
	XRateLimit Style = iota
	// IETF sends the fields of draft-ietf-httpapi-ratelimit-headers-11,
	// RateLimit-Policy and RateLimit, and Retry-After on rejections.
	IETF
	// Both sends the fields of both styles.
	Both
	// NoHeaders sends only Retry-After, on rejections.
	NoHeaders
)

// ParseStyle parses "x-ratelimit", "ietf", "both" or "none".
func ParseStyle(s string) (Style, error) {
	switch s {
	case "x-ratelimit", "":
		return XRateLimit, nil
	case "ietf":
		return IETF, nil
	case "both":
		return Both, nil
	case "none":
		return NoHeaders, nil
	}
	return 0, errors.New(`answer: unknown header style "` + s + `" (valid: x-ratelimit, ietf, both, none)`)
}

// A Field is one response header field, in the canonical form of
// net/http. Value has exactly one element; it may be shared between
// responses and must not be modified, so that middleware can assign it,
// header[f.Name] = f.Value, without a copy.
type Field struct {
	Name  string
	Value []string
}

// Problem content: the media type and cache control of every answer that
// carries a Problem body (RFC 9457). It must not be stored: RFC 6585
// forbids caching a 429, and the other statuses describe the moment too.
const (
	ProblemContentType  = "application/problem+json"
	ProblemCacheControl = "no-store"
)

// Problem types of rejections, from the IETF rate-limit headers draft.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

type problem struct {
	Type       string `json:"type,omitempty"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Problem returns the problem-details body (RFC 9457) of an answer with
// the given status to a request that is not passed on: d is the decision
// behind a 429 or 503, err the error behind a 500. Its words are fixed for
// each kind of answer; it never contains the client's key or an error's
// text, which goes to the middleware's logger instead:
//
//   - 429: problem type quota-exceeded, with the limit's name and the
//     retry delay;
//   - 503: problem type temporary-reduced-capacity (the store failed);
//   - 400: the request has no value to be limited by;
//   - 500: the key could not be computed, or the limit is misconfigured
//     (err wraps core.ErrCostExceedsLimit).
func Problem(status int, d *core.Decision, err error) []byte {
	p := problem{Status: status, Title: http.StatusText(status)}
	switch status {
	case http.StatusTooManyRequests:
		s := retrySeconds(d)
		p.Type, p.Limit, p.RetryAfter = problemQuotaExceeded, d.Name, s
		p.Detail = "rate limit exceeded; retry in " + strconv.FormatInt(s, 10) + " s"
	case http.StatusServiceUnavailable:
		p.Type, p.RetryAfter = problemReducedCapacity, retrySeconds(d)
		p.Detail = "rate limiter unavailable"
	case http.StatusBadRequest:
		p.Detail = "the request has no value to be rate limited by"
	default:
		p.Detail = "rate limit unavailable for this request"
		if errors.Is(err, core.ErrCostExceedsLimit) {
			p.Detail = "rate limit misconfigured"
		}
	}
	body, _ := json.Marshal(p)
	return append(body, '\n')
}
