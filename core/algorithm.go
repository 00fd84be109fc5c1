package core

import (
	"fmt"
	"strings"
)

// Algorithm selects how a limit counts requests. The zero value means
// DefaultAlgorithm.
type Algorithm uint8

// The five algorithms. Each has a stable name, returned by String and
// accepted by ParseAlgorithm, for flags and configuration files.
const (
	// TokenBucket keeps a bucket of Burst tokens refilled continuously at
	// Rate; a request takes cost tokens. It allows bursts up to Burst and a
	// long-run average of Rate. Name: "token-bucket".
	TokenBucket Algorithm = iota + 1

	// LeakyBucket keeps a queue of capacity Burst that drains at Rate. In
	// policing mode (the default) a request is rejected when the queue is
	// full; as a meter this is the same as a token bucket (the GCRA). In
	// shaping mode (Limit.Shaping) an admitted request is delayed until its
	// slot, so requests leave at a steady Rate. Name: "leaky-bucket".
	LeakyBucket

	// FixedWindow counts requests in windows aligned to multiples of the
	// period since the Unix epoch (minute boundaries for a per-minute
	// limit). Cheapest, but up to 2N requests can pass within one period
	// around a window boundary. Name: "fixed-window".
	FixedWindow

	// SlidingWindowLog remembers the time of every admitted request and
	// admits at most N in any interval of one period: exact, with memory per
	// key proportional to N. Name: "sliding-window-log".
	SlidingWindowLog

	// SlidingWindowCounter estimates the count over the last period as
	// current + previous x (1 - elapsed/period), from two fixed-window
	// counters. Smooth, O(1) memory. Name: "sliding-window-counter".
	SlidingWindowCounter
)

// DefaultAlgorithm is used by a Limit whose Algorithm is zero.
const DefaultAlgorithm = SlidingWindowCounter

var algorithmNames = [...]string{
	TokenBucket:          "token-bucket",
	LeakyBucket:          "leaky-bucket",
	FixedWindow:          "fixed-window",
	SlidingWindowLog:     "sliding-window-log",
	SlidingWindowCounter: "sliding-window-counter",
}

// Algorithms returns the five algorithms in declaration order.
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter}
}

// AlgorithmNames returns the names ParseAlgorithm accepts.
func AlgorithmNames() []string {
	return append([]string(nil), algorithmNames[1:]...)
}

// String returns the algorithm's name, such as "token-bucket".
func (a Algorithm) String() string {
	if a == 0 {
		return DefaultAlgorithm.String()
	}
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm with the given name. Names are
// matched case-insensitively; underscores are accepted for dashes.
func ParseAlgorithm(name string) (Algorithm, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "_", "-")
	for a := TokenBucket; a <= SlidingWindowCounter; a++ {
		if algorithmNames[a] == n {
			return a, nil
		}
	}
	return 0, fmt.Errorf("ratekit: unknown algorithm %q (valid: %s)", name, strings.Join(AlgorithmNames(), ", "))
}

func (a Algorithm) valid() bool { return a >= TokenBucket && a <= SlidingWindowCounter }

// bucket reports whether the algorithm has a burst capacity.
func (a Algorithm) bucket() bool { return a == TokenBucket || a == LeakyBucket }
