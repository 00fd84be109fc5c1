package readme

import (
	"testing"

	"github.com/ratekit/ratekit/core"
)

// The hybrid and over-limit snippets build their limiters even with Redis
// out of reach (the stores start with their circuit open).
func TestHybridAndOverLimitSnippets(t *testing.T) {
	for name, build := range map[string]func(func(*core.Limiter) error) error{"hybrid": hybridLimiter, "overlimit": cachedLimiter} {
		called := false
		if err := build(func(lim *core.Limiter) error { called = lim != nil; return nil }); err != nil || !called {
			t.Errorf("%s: %v (limiter passed on: %t)", name, err, called)
		}
	}
}
