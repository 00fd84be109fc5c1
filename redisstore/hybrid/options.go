package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

// An Option configures a Store. It is not the exact store's
// redisstore.Option: the options of one store do not compile as the
// other's.
type Option func(*config) error

// config is what the options set.
type config struct {
	prefix  string
	timeout time.Duration
	clock   func() time.Time // WithClock: the store's time, Redis's clock unread
	// localClock, when set, is this server's own clock instead of
	// time.Now (tests: a server whose clock is off).
	localClock func() time.Time
	maxKeys    int
	log        *slog.Logger
	region     string                           // "" for one region
	peers      map[string]redis.UniversalClient // the other regions' Redis
}

// DefaultTimeout bounds each sync, and the wait of a request for one,
// unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// DefaultPrefix, "rk", starts every key unless WithPrefix says otherwise,
// as in the exact store (redisstore.DefaultPrefix).
const DefaultPrefix = keys.DefaultPrefix

// DefaultMaxKeys bounds the clients a store keeps in memory, under all of
// its limiters, unless WithMaxKeys says otherwise.
const DefaultMaxKeys = 100_000

// WithPrefix sets the first part of every key the store writes (default
// DefaultPrefix), to keep ratekit's keys apart from an application's own
// or two deployments apart in one Redis. It may hold letters, digits and
// "-_./:", at most 64 bytes.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := keys.CheckPrefix(prefix); err != nil {
			return err
		}
		c.prefix = prefix
		return nil
	}
}

// WithTimeout bounds each sync's round trip, and the time a request waits
// for a sync when its lease is used up (default DefaultTimeout). A request
// whose sync does not answer in time is decided in process, within this
// server's share; a sync that does not answer in time counts toward
// opening the circuit, as a failed one does.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: hybrid timeout %s must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// WithClock makes the store take the time from now instead of Redis's
// clock (see New). It exists for tests that replay traces against a real
// Redis; a production store must not use it. Under it, windows follow now
// alone, and keys live ten minutes of real time longer than their windows
// need (test time and real time do not pass alike).
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return errors.New("redisstore: hybrid WithClock(nil)")
		}
		c.clock = now
		return nil
	}
}

// WithMaxKeys bounds the clients a store keeps, under all of its limiters
// (default DefaultMaxKeys). When its table is full, clients whose leases
// are used up are forgotten first (their counts are in Redis); a client
// seen again starts from what Redis holds.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < nshards {
			return fmt.Errorf("redisstore: max keys %d must be at least %d", n, nshards)
		}
		c.maxKeys = n
		return nil
	}
}

// WithLogger sets the logger of the store's sync and replication failures
// (default slog.Default()): one line when an episode starts, one when it
// ends.
func WithLogger(log *slog.Logger) Option {
	return func(c *config) error {
		if log == nil {
			return errors.New("redisstore: hybrid WithLogger(nil)")
		}
		c.log = log
		return nil
	}
}

// WithRegion makes the store one region of several: name is this
// region's, peers the Redis of every other region, by name (names of 1 to
// 32 letters, digits, '-' or '_'). Each region counts its own requests in
// its own Redis, and the servers send their region's counts to the others
// every sync interval, so that a limit holds across regions.
//
// Each window keeps one count per region (a grow-only counter per region):
// a region's servers count in their own Redis, and after each sync send
// their region's count, with a version, to every other region's Redis,
// which keeps the newest. A region cut off from another keeps limiting on
// its own counts and the last it heard, and sends the newest count when
// the link returns: nothing lost, nothing counted twice. Across regions,
// the limit can be exceeded by what the other regions admit before their
// counts arrive (a sync interval plus the link's delay), and, during a
// partition, by what they admit while cut off.
//
// A send to another region may take max(15 s, 20 sync intervals) (the
// peer timeout), connecting included; a send starts every interval, up to
// four under way, so a link that is slow but answers delays counts, and
// only one that does not answer in time is a partition. Give the peers'
// clients a ReadTimeout of -1 (or at least the peer timeout) and
// ContextTimeoutEnabled: a client that gives up sooner turns a slow link
// into a partition, and one without ContextTimeoutEnabled waits for its
// ReadTimeout instead of the peer timeout (with -1, on a link that does
// not answer, for ever, and Close with it); New logs a warning for
// either. A count another region sends is taken as no less than 0 and no
// more than the window's limit here.
func WithRegion(name string, peers map[string]redis.UniversalClient) Option {
	return func(c *config) error {
		if err := regionName(name); err != nil {
			return err
		}
		if len(peers) == 0 {
			return fmt.Errorf("redisstore: region %q has no other region to share counts with", name)
		}
		for n, p := range peers {
			if err := regionName(n); err != nil {
				return err
			}
			if n == name || p == nil {
				return fmt.Errorf("redisstore: region %q: peer %q must be another region, with a client", name, n)
			}
		}
		c.region, c.peers = name, peers
		return nil
	}
}

// regionName checks a region's name: letters, digits, '-' and '_'.
func regionName(name string) error {
	if name == "" || len(name) > 32 || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return errors.New("redisstore: region name " + strconv.Quote(name) + " must be 1 to 32 letters, digits, '-' or '_'")
	}
	return nil
}
