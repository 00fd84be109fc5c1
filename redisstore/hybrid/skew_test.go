package hybrid_test

import (
	"time"

	"github.com/ratekit/ratekit/redisstore/hybrid"
)

// withSkew sets a store's own clock d off time.Now.
func withSkew(d time.Duration) hybrid.Option { return hybrid.WithSkew(d) }
