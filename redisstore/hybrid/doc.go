// Package hybrid is the hybrid Redis store of ratekit: each server decides
// requests in process, on leases of the limit that it takes from Redis,
// and syncs with Redis every interval, so most requests never wait for a
// round trip while the servers together still admit no more than the
// limit.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
//	store, err := hybrid.New(rdb, time.Second, hybrid.WithPrefix("myapi"))
//	...
//	defer store.Close() // sends the last counts, gives back unused leases
//	lim, err := core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(6000)},
//		core.WithStore(store))
//
// A lease is a slice of a limit that Redis counted when it handed it out:
// this server's share of what is left (left / servers), at most twice what
// the client sent here in the last interval. A request is admitted only
// out of a lease, so while Redis answers the servers never admit more than
// the limit. When a lease runs out, the request waits for one round trip
// that takes a new lease for every client that needs one; every interval a
// sync pushes the counts of every client used since the last one and gives
// back the leases nobody used. Near the limit, leases shrink to one
// request, so a window's last requests are decided in Redis one by one;
// past it, rejections are decided in process. The price is
// under-admission: leases held by idle servers, for at most an interval.
//
// Under a sliding window counter, what is left is counted two intervals
// ahead: the previous window's weight falls at a pace known from the
// window's start, so a lease lasts until the next interval sync, which
// tops it up, instead of shrinking to one request for every request
// under sustained overload. A lease only bounds what a server may admit:
// each request is still decided by the counter's estimate at its own
// time, over what this server admitted and what every other server
// holds, so the servers together admit no more than the counter allows.
// The price is under-admission too: leases held up to two intervals
// ahead.
//
// Only limits whose counts merge by adding can be hybrid: fixed windows and
// sliding window counters (a bucket or a log is an error at Bind). Windows
// start and end by Redis's clock, which every sync reads (TIME, in the
// sync's script) and each server carries forward on its monotonic clock
// between syncs: servers whose clocks disagree, by seconds or hours, still
// count in the same windows (to within half a round trip to Redis). A
// Redis that refuses TIME in scripts leaves each server on its own clock.
// While Redis is away, each server goes on deciding within its leases and its share of
// what no server had leased at its last sync; when Redis answers again,
// the counts are written whole, with a sequence number, so a sync resent
// after a lost answer never counts twice. Inspect, Reset and Grant work as
// on the exact store; other servers see a reset or a grant at their next
// sync of the client.
//
// With WithRegion the store is one region of several, each with its own
// Redis: every window keeps one count per region, which each region's
// servers send to the other regions' Redis after each sync, versioned, so
// a count that arrives twice, late or out of order changes nothing. Across
// regions the limit can be exceeded by what the others admit before their
// counts arrive (a sync interval plus the link's delay), or while cut off.
// A link that is slow but answers is not a partition: a send to another
// region may take max(15 s, 20 sync intervals), several sends under way at
// once. A region's count is taken as no less than 0 and no more than the
// window's limit, whatever it says. Each region's windows follow its own
// Redis's clock.
//
// Keys follow the exact store's scheme (redisstore), with a window or grant
// suffix, under the same prefix. This package's Option is a type of its
// own: an option of the exact store (redisstore.WithFallback) passed to
// New, or one of these (WithRegion) passed to redisstore.New, does not
// compile.
package hybrid
