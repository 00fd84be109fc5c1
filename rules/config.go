package rules

import (
	"fmt"
	"strings"
)

// A Config is one rules file, or the same rules built in Go: a domain and
// a tree of descriptors, in the schema of the Envoy rate-limit service
// (envoyproxy/ratelimit) plus ratekit's extensions (Match on a descriptor;
// Algorithm, Burst and SoftPercent on a rate limit).
//
// The Line fields locate each element in its file, for error messages; a
// Config built in Go leaves them zero.
type Config struct {
	// Source names where the config came from, such as the file name;
	// errors start with it. Empty for a config built in Go.
	Source string

	// Domain scopes the rules: two configs with different domains never
	// share counters.
	Domain string

	// Descriptors are the top-level descriptors.
	Descriptors []Descriptor

	// Cascade (a ratekit extension) applies every rate limit on the way
	// down a nested path, not only the one where the request's descriptor
	// ends: a child's limit then adds to its parents' instead of
	// replacing them. Envoy applies only the last (see the package
	// documentation).
	Cascade bool

	// Line is the line of the domain field.
	Line int
}

// A Descriptor matches one piece of request data and, when it matches,
// applies its rate limit and descends into its child descriptors.
//
// Key names the request data (see the package documentation for the
// built-in keys and Engine options for registering more). Among sibling
// descriptors with the same key, the one whose Value equals the request's
// value wins over the one without a Value, which matches any value.
type Descriptor struct {
	// Key is the descriptor key, such as "remote_address" or
	// "header:X-API-Key".
	Key string

	// Value, when set, restricts the descriptor to requests whose value
	// for Key is Value. A "*" anywhere in Value is a wildcard that stands
	// for any run of characters, empty included ("files/*", "svc*ep*rpc").
	Value string

	// RateLimit is the limit applied when the descriptor matches; nil for
	// a descriptor that only groups children.
	RateLimit *RateLimit

	// ShadowMode counts requests against the limit but never rejects one:
	// a request the limit would reject passes, with the rate-limit
	// headers, and is reported to the observer as core.ShadowDenied.
	ShadowMode bool

	// ShareThreshold makes every value that a wildcard Value matches
	// share one counter, as Envoy's share_threshold does; without it each
	// distinct value is counted apart. It has no effect on a Value
	// without "*".
	ShareThreshold bool

	// QuotaMode, Envoy's soft quota, admits requests over the limit and
	// reports them: ratekit decides such a descriptor as in ShadowMode
	// (Envoy's dynamic metadata has no in-process equivalent; observers
	// see core.ShadowDenied).
	QuotaMode bool

	// DetailedMetric and ValueToMetric are accepted for compatibility
	// with Envoy files and have no effect: ratekit's metrics never carry
	// request values.
	DetailedMetric, ValueToMetric bool

	// Metadata is Envoy's free-form descriptor metadata, kept as parsed
	// (maps, lists and strings) for the application to read; the engine
	// does not use it.
	Metadata any

	// Match (a ratekit extension) restricts the descriptor and its
	// children to requests with a given method and path.
	Match *Match

	// Descriptors are the child descriptors, tried when this one matches.
	Descriptors []Descriptor

	// Line is the line of the descriptor's key field.
	Line int
}

// A RateLimit is the limit of one descriptor.
type RateLimit struct {
	// Unit is the period of the limit: "second", "minute", "hour",
	// "day", "week", "month" (30 days) or "year" (365 days), in any case,
	// as Envoy's units.
	Unit string

	// UnitMultiplier makes the period that many Units (Envoy's
	// unit_multiplier); 0 means 1.
	UnitMultiplier int

	// RequestsPerUnit is the number of requests allowed per Unit. Zero
	// rejects every request (a block list entry, as in Envoy).
	RequestsPerUnit int

	// Unlimited exempts the matching requests: the descriptor applies no
	// limit, so a specific value can be exempted from a key-wide limit.
	// It excludes Unit and RequestsPerUnit.
	Unlimited bool

	// Name names the limit, for Replaces; unique in the config.
	Name string

	// Replaces lists names of limits that this one suppresses when both
	// apply to a request.
	Replaces []string

	// Algorithm (a ratekit extension) is the counting algorithm, one of
	// core's algorithm names; empty means "fixed-window", as in Envoy.
	Algorithm string

	// Burst (a ratekit extension) is the capacity of a token or leaky
	// bucket; zero means RequestsPerUnit.
	Burst int

	// SoftPercent (a ratekit extension) admits up to this many percent
	// over the limit; those requests pass with the header
	// X-Ratelimit-Soft and are reported as core.SoftAllowed.
	SoftPercent int

	// Line is the line of the rate_limit field.
	Line int
}

// A Match (a ratekit extension) restricts a descriptor to some requests.
type Match struct {
	// Methods are the request methods that match, such as "POST"; empty
	// matches every method.
	Methods []string

	// Path is the path pattern: an exact path such as "/login", or a
	// prefix ending in "/*" such as "/api/*", which matches "/api" and
	// every path below it. A "*" segment elsewhere matches any one
	// segment. Empty matches every path. Request paths are cleaned
	// (path.Clean) before matching, so "//login/" matches "/login".
	Path string

	// Line is the line of the match field.
	Line int
}

// An Error reports one invalid element of a Config. A failed Load returns
// every Error found, joined (errors.Join), up to 100 and then one saying
// there are too many; each can be reached with errors.As. Messages quote
// the config's values cut to 40 characters.
type Error struct {
	Source string // Config.Source
	Line   int    // the element's line; 0 in a config built in Go
	Path   string // where the element is in the tree, such as "descriptors[1].rate_limit"
	Msg    string // what is wrong
}

// Error formats the error as "source:line: path: msg", leaving out what
// is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
