package hybrid

import "time"

// WithSkew makes the store's server clock read d off time.Now, for the
// tests of servers whose clocks disagree: unlike WithClock, Redis's clock
// is still read.
func WithSkew(d time.Duration) Option {
	return func(c *config) error {
		c.localClock = func() time.Time { return time.Now().Add(d) }
		return nil
	}
}
