package observe

// OutOfMemory is the decisions a Redis store made while Redis was out of
// memory, read from the store when the metrics are collected
// (WithOutOfMemory).
var OutOfMemory = Metric{Prometheus: "ratekit_store_out_of_memory_total", OTel: "ratekit.store.out_of_memory", Unit: "{decision}",
	Labels: []string{LabelStore},
	Help:   "Decisions the Redis store made while Redis was out of memory (maxmemory): clients with a key decided in Redis, new clients in process. Above zero, Redis is full."}

// AddOutOfMemory is WithOutOfMemory: OutOfMemory reports the sum of the
// counts that count returns, such as a Redis store's OutOfMemory method.
func (c *Config) AddOutOfMemory(count func() int64) error {
	if count == nil {
		return c.errorf("WithOutOfMemory: the count is nil")
	}
	c.outOfMemory = append(c.outOfMemory, count)
	return nil
}

// OutOfMemory returns the sum of the counts of AddOutOfMemory, and whether
// any was added (else the metric is not exported).
func (c *Config) OutOfMemory() (n int64, ok bool) {
	for _, count := range c.outOfMemory {
		n += count()
	}
	return n, len(c.outOfMemory) > 0
}
