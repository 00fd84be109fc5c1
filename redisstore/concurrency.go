package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

//go:embed concurrency.lua
var leaseSource string

var leaseScript = redis.NewScript(leaseSource)

// Concurrency returns the store of concurrency limiters' leases in this
// store's Redis, with its prefix, timeout and circuit breaker, for
// concurrency.WithStore: every server that uses the same Redis and prefix
// shares the slots of a key under a limiter's name.
//
//	inflight, err := concurrency.NewLimiter(4, concurrency.WithName("reports"),
//		concurrency.WithStore(store.Concurrency()))
//
// The leases of a key are one sorted set, each lease a member scored by
// the time it ends (Redis TIME, in milliseconds), and each call is one
// script over that one key, so it is atomic and Redis Cluster safe: an
// acquire drops the leases that ended, counts the rest and adds its own
// when there is room; a renewal pushes a held lease's end; a release
// removes it. A lease whose server crashed is dropped by the first
// acquire after its end: no crash holds a slot longer than a lease TTL
// past its last renewal. The set expires a second after its last lease
// would, and a key with no lease held has no set.
//
// The key is the prefix, the client key's hash in braces and a tag of
// the limiter's name, as for rate limits (24 bytes after the prefix); a
// lease ID is this process's ID for it behind a random tag of the store,
// about 20 bytes. Measured with Redis 7.0 (TestConcurrencyMemoryPerLease:
// used_memory growth over 5,000 clients), a client's first lease costs
// 155 to 186 bytes, its key included, and each further one 32 bytes (up to
// 128 leases per client, which Redis keeps in its compact encoding).
//
// Every call is bounded by the store's timeout. Calls are idempotent (an
// acquire sent twice renews its own lease), so go-redis may retry them.
// A call that fails, or finds the circuit open (ErrUnavailable), is an
// error that the limiter's fail mode decides; WithFallback does not apply
// to leases.
func (s *Store) Concurrency() concurrency.Store {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	return &leases{store: s, instance: base64.RawURLEncoding.EncodeToString(nonce[:]) + ":"}
}

// leases is the concurrency.Store of a Store.
type leases struct {
	store    *Store
	instance string // starts every lease ID of this store

	tags  sync.Map // limiter name -> tag
	ntags int      // names in tags, under tagMu
	tagMu sync.Mutex
}

// maxNameTags bounds the names whose tags are remembered.
const maxNameTags = 1024

// key returns the Redis key of the leases of client key under the
// limiter name.
func (l *leases) key(name, key string) (string, error) {
	tag, ok := l.tags.Load(name)
	if !ok {
		t, err := l.store.tags.Of("concurrency:" + name)
		if err != nil {
			return "", err
		}
		l.tagMu.Lock()
		if l.ntags < maxNameTags {
			l.tags.Store(name, t)
			l.ntags++
		}
		l.tagMu.Unlock()
		tag = t
	}
	client := keys.ClientTag(key)
	return l.store.prefix + string(client[:]) + tag.(string), nil
}

// run runs the lease script on the key of client key under name.
func (l *leases) run(ctx context.Context, op any, name, key string, id uint64, max int, ttl time.Duration) ([]int64, error) {
	k, err := l.key(name, key)
	if err != nil {
		return nil, err
	}
	s := l.store
	if s.circuit.IsOpen() {
		return nil, ErrUnavailable
	}
	now, slack := argNone, "1000"
	if s.clock != nil {
		now, slack = strconv.FormatInt(s.clock().Sub(s.base).Milliseconds(), 10), "600000"
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := leaseScript.Run(ctx, s.client, []string{k},
		op, l.instance+strconv.FormatUint(id, 36), intArg(max), ttl.Milliseconds(), now, slack).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("lease script answered %d values", len(res))
	}
	if err != nil {
		s.circuit.Failed(err)
		return nil, fmt.Errorf("redisstore: concurrency: %w", err)
	}
	s.circuit.Answered()
	return res, nil
}

var argAcquire, argRenew, argRelease any = "a", "n", "r"

// Acquire takes a slot of key under the limiter name; see
// concurrency.Store.
func (l *leases) Acquire(ctx context.Context, name, key string, id uint64, max int, ttl time.Duration) (int, bool, error) {
	if err := checkLease(max, ttl); err != nil {
		return 0, false, err
	}
	res, err := l.run(ctx, argAcquire, name, key, id, max, ttl)
	if err != nil {
		return 0, false, err
	}
	return int(res[1]), res[0] == 1, nil
}

// Renew extends a held lease by ttl from now; see concurrency.Store.
func (l *leases) Renew(ctx context.Context, name, key string, id uint64, ttl time.Duration) (bool, error) {
	if err := checkLease(1, ttl); err != nil {
		return false, err
	}
	res, err := l.run(ctx, argRenew, name, key, id, 0, ttl)
	if err != nil {
		return false, err
	}
	return res[0] == 1, nil
}

// Release gives back a lease; see concurrency.Store.
func (l *leases) Release(ctx context.Context, name, key string, id uint64) error {
	_, err := l.run(ctx, argRelease, name, key, id, 0, 0)
	return err
}

func checkLease(max int, ttl time.Duration) error {
	if max < 1 || ttl < time.Millisecond {
		return errors.New("redisstore: concurrency: max must be at least 1 and the lease TTL at least 1ms")
	}
	return nil
}
