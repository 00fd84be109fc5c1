package client

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxSeconds is the largest number of seconds a time.Duration holds; larger
// values are garbage, not waits.
const maxSeconds = math.MaxInt64 / int64(time.Second)

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
		if err != nil || n > maxSeconds {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(date.Sub(now), 0), true
}

// exhausted returns the t of the exhausted policy of the IETF RateLimit
// field, such as "api";r=0;t=30: the member with r=0, the longest t if
// several. Members without a valid r and t are skipped.
func exhausted(h http.Header) (time.Duration, bool) {
	var wait time.Duration
	found := false
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
		if r == 0 && t >= 0 && (!found || time.Duration(t)*time.Second > wait) {
			wait, found = time.Duration(t)*time.Second, true
		}
	}
	return wait, found
}

// integer parses a non-negative structured-field integer (at most 15
// digits), or returns -1.
func integer(s string) int64 {
	if s == "" || len(s) > 15 || strings.Trim(s, "0123456789") != "" {
		return -1
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	if n > maxSeconds {
		return -1
	}
	return n
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
	return max(time.Unix(int64(whole), int64(frac*1e9)).Sub(now), 0), true
}

// seconds parses a non-negative decimal number of seconds, such as "7" or
// "1.5", that fits in a time.Duration.
func seconds(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || strings.Trim(v, "0123456789.") != "" {
		return 0, false
	}
	s, err := strconv.ParseFloat(v, 64)
	return s, err == nil && s < float64(maxSeconds)
}

func duration(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
