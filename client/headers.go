package client

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxSeconds is the largest whole number of seconds a time.Duration holds;
// larger waits saturate to forever.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// forever is the longest Duration: a well-formed wait too large for a
// Duration saturates to it, which is longer than any maximum wait.
const forever = time.Duration(math.MaxInt64)

// epochFrom is the smallest X-RateLimit-Reset read as a Unix time.
const epochFrom = 1e9

// serverWait returns the wait a 429 asks for, from the first usable of
// Retry-After, the IETF RateLimit field and the X-RateLimit reset fields.
func serverWait(h http.Header, now time.Time) (time.Duration, string, bool) {
	if d, ok := retryAfter(h, now); ok {
		return d, SourceRetryAfter, true
	}
	if d, ok := exhausted(h); ok {
		return d, SourceRateLimit, true
	}
	d, ok := reset(h, now)
	return d, SourceReset, ok
}

// quotaWait returns how long until a quota that resp says is spent resets.
func quotaWait(resp *http.Response, now time.Time) (time.Duration, bool) {
	h := resp.Header
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		d, _, ok := serverWait(h, now)
		return d, ok
	case http.StatusServiceUnavailable:
		return retryAfter(h, now)
	}
	if d, ok := exhausted(h); ok {
		return d, true
	}
	if strings.TrimSpace(h.Get("X-Ratelimit-Remaining")) != "0" {
		return 0, false
	}
	return reset(h, now)
}

// retryAfter parses Retry-After: delay-seconds or an HTTP-date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v != "" && strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil { // only digits: too large for an int64
			return forever, true
		}
		return wholeSeconds(n), true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(date.Sub(now), 0), true
}

// quotaLeft reports whether a response other than a 429 or 503 says quota
// is left: X-RateLimit-Remaining above 0, or an IETF RateLimit member with
// r above 0. (Whether a quota is spent is asked first, of quotaWait.)
func quotaLeft(resp *http.Response) bool {
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		return false
	}
	v := strings.TrimSpace(resp.Header.Get("X-Ratelimit-Remaining"))
	if v != "" && strings.Trim(v, "0123456789") == "" && strings.Trim(v, "0") != "" {
		return true
	}
	_, _, left := rateLimit(resp.Header)
	return left
}

// exhausted returns the t of the exhausted policy of the IETF RateLimit
// field, such as "api";r=0;t=30: the member with r=0, the longest t if
// several. Members without a valid r and t are skipped.
func exhausted(h http.Header) (time.Duration, bool) {
	wait, found, _ := rateLimit(h)
	return wait, found
}

// rateLimit reads the IETF RateLimit field: the longest t of the members
// with r=0 and whether there is one, and whether a member has r above 0.
func rateLimit(h http.Header) (wait time.Duration, exhausted, left bool) {
	for _, member := range split(strings.Join(h.Values("Ratelimit"), ","), ',') {
		r, t := int64(-1), int64(-1)
		for _, param := range split(member, ';')[1:] {
			key, value, _ := strings.Cut(strings.TrimSpace(param), "=")
			switch key {
			case "r":
				r = integer(value)
			case "t":
				t = integer(value)
			}
		}
		switch {
		case r > 0:
			left = true
		case r == 0 && t >= 0 && (!exhausted || wholeSeconds(t) > wait):
			wait, exhausted = wholeSeconds(t), true
		}
	}
	return wait, exhausted, left
}

// integer parses a non-negative structured-field integer (at most 15
// digits, as RFC 8941 says: a longer one is malformed), or returns -1.
func integer(s string) int64 {
	if s == "" || len(s) > 15 || strings.Trim(s, "0123456789") != "" {
		return -1
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// wholeSeconds returns n ≥ 0 seconds as a Duration, saturated to forever.
func wholeSeconds(n int64) time.Duration {
	if n > maxSeconds {
		return forever
	}
	return time.Duration(n) * time.Second
}

// split splits a structured field at sep, except inside quoted strings.
func split(s string, sep byte) []string {
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// reset returns the wait of X-RateLimit-Reset-After (seconds), else of
// X-RateLimit-Reset (seconds, or a Unix time from epochFrom on).
func reset(h http.Header, now time.Time) (time.Duration, bool) {
	if s, ok := seconds(h.Get("X-Ratelimit-Reset-After")); ok {
		return duration(s), true
	}
	s, ok := seconds(h.Get("X-Ratelimit-Reset"))
	if !ok {
		return 0, false
	}
	if s < epochFrom {
		return duration(s), true
	}
	whole, frac := math.Modf(s)
	if whole-float64(now.Unix()) > float64(maxSeconds) {
		return forever, true // also keeps time.Unix from overflowing
	}
	return max(time.Unix(int64(whole), int64(frac*1e9)).Sub(now), 0), true
}

// seconds parses a non-negative decimal number of seconds, such as "7" or
// "1.5"; one too large for a float64 is +Inf.
func seconds(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || strings.Trim(v, "0123456789.") != "" {
		return 0, false
	}
	s, err := strconv.ParseFloat(v, 64)
	if errors.Is(err, strconv.ErrRange) && math.IsInf(s, 1) {
		return s, true // well-formed, only too large
	}
	return s, err == nil
}

// duration returns s ≥ 0 seconds as a Duration, saturated to forever.
func duration(s float64) time.Duration {
	ns := math.Round(s * float64(time.Second))
	if ns >= float64(math.MaxInt64) { // float64(MaxInt64) is 2^63
		return forever
	}
	return time.Duration(ns)
}
