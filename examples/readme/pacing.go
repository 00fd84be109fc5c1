package readme

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore"
)

// fleetClient builds the HTTP client of every instance of a service that
// calls a provider allowing 100 requests per second in all: the instances
// share one budget in the Redis at 10.0.0.5. Building it sends nothing to
// Redis.
func fleetClient() (*http.Client, error) {
	// snippet: pacing
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	store, err := redisstore.New(rdb, redisstore.WithPrefix("billing"))
	if err != nil {
		return nil, err
	}
	// The provider's rate; half its burst, to absorb the network's jitter.
	lim, err := core.NewLimiter(core.Limit{Name: "provider-calls", Algorithm: core.TokenBucket,
		Rate: core.PerSecond(100), Burst: 50}, core.WithStore(store))
	if err != nil {
		return nil, err
	}
	rt, err := client.New(http.DefaultTransport, client.WithLimiter(lim, nil)) // nil: keyed by host
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: rt}
	// end snippet
	return hc, nil
}

// callPaced gets url with hc, a client of fleetClient, within two seconds,
// and reports (true) a request that was not sent because the fleet's
// next turn came after that: the caller tries it again later.
func callPaced(ctx context.Context, hc *http.Client, url string) (*http.Response, bool, error) {
	// snippet: pacing-call
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := hc.Do(req) // waits for the fleet's turn, within ctx
	if errors.Is(err, client.ErrLimited) {
		return nil, true, nil // not sent: no turn before the deadline; try later
	}
	// end snippet
	return resp, false, err
}
