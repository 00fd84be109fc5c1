// Package keys is the Redis key scheme that the exact store (redisstore)
// and the hybrid store (redisstore/hybrid) share: the prefix that starts
// every key, the hash tag of a client, and the tag of a limit.
//
//	<prefix>{<client hash>}<limit tag>
//
// The client hash is 96 bits of the SHA-256 of the client key, in
// base64url (HashLen bytes): client keys are attacker-controlled text, and
// hashed they can neither break out of their key nor bloat Redis memory.
// In braces it is the key's hash tag, so every key of one client is in one
// Redis Cluster slot. The limit tag is 36 bits of the SHA-256 of a limit's
// name, algorithm and period (TagLen bytes); Tags refuses a tag it has
// seen for another limit. A store may add a suffix of its own (the hybrid
// store's window index).
package keys

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"github.com/ratekit/ratekit/core"
)

// DefaultPrefix starts every key unless a store's WithPrefix says
// otherwise.
const DefaultPrefix = "rk"

// HashLen is the length of a client key's hash in a key: 96 bits in
// base64url; TagLen the length of a limit's tag.
const (
	HashLen = 16
	TagLen  = 6
)

// MaxPrefix is the longest prefix, in bytes.
const MaxPrefix = 64

// CheckPrefix reports a prefix that is empty, longer than MaxPrefix, or
// holds a character other than letters, digits and "-_./:" (a brace would
// make a hash tag of its own).
func CheckPrefix(p string) error {
	if p == "" || len(p) > MaxPrefix {
		return fmt.Errorf("redisstore: prefix %q must be 1 to %d bytes", p, MaxPrefix)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '/' || c == ':') {
			return fmt.Errorf("redisstore: prefix %q: character %q not allowed (use letters, digits and -_./:)", p, c)
		}
	}
	return nil
}

// ClientTag returns the hash tag of client key in a key: its hash in
// braces, so that all the keys of one client are in one Cluster slot.
func ClientTag(key string) (tag [HashLen + 2]byte) {
	sum := sha256.Sum256([]byte(key))
	tag[0] = '{'
	base64.RawURLEncoding.Encode(tag[1:HashLen+1], sum[:12])
	tag[HashLen+1] = '}'
	return tag
}

// Tags hands out the tags of limits and remembers which identity each
// belongs to, so that two limits whose keys would meet are refused. The
// zero value is ready to use; it is safe for concurrent use.
type Tags struct {
	mu  sync.Mutex
	ids map[string]string // tag -> identity
}

// maxTags bounds the tags remembered (limits reloaded without end must
// not grow the table without bound).
const maxTags = 1 << 16

// Limit returns the tag of the limit p: a hash of its name, algorithm
// and period.
func (t *Tags) Limit(p *core.Params) (string, error) {
	return t.Of(p.ID + "/" + time.Duration(p.Period*int64(p.Unit)).String())
}

// Of returns the tag of the limit (or concurrency limiter) whose identity
// is id, or an error when the tag was seen for another identity.
func (t *Tags) Of(id string) (string, error) {
	sum := sha256.Sum256([]byte(id))
	var b [8]byte
	base64.RawURLEncoding.Encode(b[:], sum[:6])
	tag := string(b[:TagLen])
	t.mu.Lock()
	defer t.mu.Unlock()
	if other, ok := t.ids[tag]; ok && other != id {
		return "", fmt.Errorf("redisstore: %w: limits %q and %q would share Redis keys; rename one", core.ErrInvalidLimit, other, id)
	}
	if t.ids == nil {
		t.ids = map[string]string{}
	}
	if len(t.ids) < maxTags {
		t.ids[tag] = id
	}
	return tag, nil
}
