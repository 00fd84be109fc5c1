package redisstore

import (
	"fmt"
	"strings"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

// Key returns the Redis key that holds the state of client key under
// limit l, for operators who need to inspect or delete one client's
// state (redis-cli PTTL, DEL). A limit of 0 requests has none.
//
// A key is
//
//	<prefix>{<client hash>}<limit tag>
//
// 24 bytes after the prefix (DefaultPrefix "rk": 26 bytes, within the
// 28 bytes of Redis's smallest key allocation). The client hash is 96 bits
// of the SHA-256 of the client key, in base64url; the limit tag 36 bits of
// the SHA-256 of the limit's name, algorithm and period. Client keys are
// attacker-controlled text (headers, API keys): hashed, they cannot break
// out of their key, collide with another limit's key or bloat Redis
// memory, and they are not stored in clear (the hash is not secret,
// though: an IPv4 address can be found from its hash by trying all 2^32).
// The hash tag puts the keys of one client under all of a limiter's
// limits, everything one decision touches, in one Redis Cluster slot.
//
// The state is one integer in a Redis string, which Redis keeps in its
// smallest form: a bucket's theoretical arrival time (GCRA), a window's
// index (modulo 2^18) and counts packed together. A decision reads it
// with GET and writes it with SET ... PX (or, adding to the window the
// key already holds, INCRBY, whose TTL already runs to that window's
// end): two commands inside Redis. A
// sliding window log is a sorted set of the admitted requests, bounded by
// the limit's count (MaxLogCount). A sliding window counter whose counts
// reach 2^17 keeps them as text, which costs about 30 bytes more per
// client. An operator's grant (core.Limiter.Grant) follows the state in
// its text; in a log it is one more member, scored +inf. Measured with
// Redis 7.0 (TestMemoryPerClient: used_memory growth over 20,000 and
// 100,000 clients), a client under one bucket or window limit costs 133
// to 138 bytes of Redis memory, so a million clients about 130 MB.
func (s *Store) Key(l core.Limit, key string) (string, error) {
	p, err := s.params(l)
	if err != nil {
		return "", err
	}
	if p.Block {
		return "", fmt.Errorf("redisstore: limit %q blocks every request and keeps no state", p.Name)
	}
	c, err := s.bind([]core.Limit{l})
	if err != nil {
		return "", err
	}
	var ks [core.MaxLimits]string
	c.keys(key, &ks)
	return ks[0], nil
}

// keys writes the Redis keys of client key under the limits with state to
// dst, all slices of one string: the prefix, the client's hash tag, the
// limit's tag.
func (c *counter) keys(key string, dst *[core.MaxLimits]string) {
	tag := keys.ClientTag(key)
	var b strings.Builder
	b.Grow(c.keyLen * len(c.tags))
	for _, t := range c.tags {
		b.WriteString(c.store.prefix)
		b.Write(tag[:])
		b.WriteString(t)
	}
	all := b.String()
	for i := range c.tags {
		dst[i] = all[i*c.keyLen : (i+1)*c.keyLen]
	}
}
