package concurrency

// WithManualRenewal makes the limiter renew its leases only when the test
// calls RenewDue, one tick of the renewing goroutine each.
func WithManualRenewal() Option {
	return func(l *Limiter) error { l.manual = true; return nil }
}

// RenewDue renews the leases due, as the renewing goroutine does on each
// tick, and reports whether any lease is held.
func RenewDue(l *Limiter) bool { return l.renewDue() }
