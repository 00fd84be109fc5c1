// Package redisstore is the exact Redis store of ratekit: every server of
// an API shares one limit through a Redis server or cluster, and every
// decision is made in Redis, atomically, by Redis's clock.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapi"))
//	...
//	lim, err := core.NewLimiter(core.Limit{Name: "api", Rate: core.PerMinute(100)}, core.WithStore(store))
//
// A limiter binds all of its limits at once (Store.Bind). Each decision is
// then one call of the store's Redis Function library (FCALL; the same
// code as a script where Functions are refused) that decides the request
// by every limit and counts it in all of them or, when one rejects it, in
// none: concurrent decisions on one client, from any number of servers,
// never admit more than a limit allows. The time is Redis's (TIME), so
// servers whose clocks disagree still agree on every count. Decisions that
// arrive while round trips are on the wire share the next one
// (WithInFlight). The arithmetic is the memory store's, in microseconds;
// both pass the same conformance suite (core/storetest).
//
// The state of a client under a limit is one small key, written with its
// TTL (a second past the moment the state is back to full capacity, so a
// crash never leaves a key that blocks a client, and expiry never changes
// a decision):
//
//	<prefix>{<client hash>}<limit tag>
//
// The client hash is 96 bits of the SHA-256 of the client key, so client
// text never reaches Redis key syntax, and in braces it keeps everything
// one decision touches in one Cluster slot. The limit tag is a hash of the
// limit's name, algorithm and period: limits with the same name, algorithm
// and period share counters on every server that uses the same Redis and
// prefix (name limits that must not). A client costs about 135 bytes of
// Redis memory per limit; Store.Key returns its key.
//
// Every decision is bounded by WithTimeout. A failed decision is an error,
// which the limiter's fail mode decides (open by default, or closed). When
// Redis times out or cannot be reached three times in a row, the circuit
// opens: decisions fail at once (ErrUnavailable), or are decided in
// process (WithFallback), until a probe finds Redis again. A Redis out of
// memory still decides the clients it has keys for, by Functions or by
// scripts alike, and new clients are decided in process (New); the
// episode is logged and counted (Store.OutOfMemory).
//
// The same Redis holds concurrency leases (Store.Concurrency) and queues
// (NewQueue).
//
// Package redisstore/hybrid is the other Redis store: each server decides
// in process, on leases of the limit from Redis, and syncs with Redis
// every interval, across regions if need be. Each package has its own
// Option type, so an option of one store passed to the other (hybrid's
// WithRegion to New, WithFallback to hybrid.New) does not compile.
package redisstore
