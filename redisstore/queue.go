package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

// Bounds of QueueOptions.
const (
	MaxQueueLen       = 10_000_000
	MinVisibility     = 10 * time.Millisecond
	DefaultVisibility = 30 * time.Second
)

// QueueOptions configure NewQueue.
type QueueOptions struct {
	// MaxLen is the most items the queue holds, waiting or leased: from 1
	// to MaxQueueLen. Required. A push beyond it is queue.ErrFull; no
	// item is ever trimmed to make room.
	MaxLen int

	// Visibility is how long a received item stays leased to its worker:
	// past it, any worker may claim it (XAUTOCLAIM) and serve it again.
	// Longer than a handler takes. From MinVisibility to 24h; default
	// DefaultVisibility.
	Visibility time.Duration

	// Consumer names this process in the stream's consumer group (letters,
	// digits and -_.:, at most 64 bytes). Default: the host name, or a
	// random name when it is not such a name. Keep it stable across
	// restarts, so that the group's list of consumers stays short.
	Consumer string

	// Prefix starts the stream's key (as WithPrefix of New; default
	// DefaultPrefix).
	Prefix string
}

// A Queue is a queue.Queue in a Redis stream: every server of a fleet
// pushes to it and drains it, and an item outlives the process that
// pushed it and the one serving it.
//
// The stream is the key PREFIX:q:{NAME}. Push adds an entry with XADD,
// after checking the stream's length in the same script, so that a full
// queue refuses the item rather than trimming an unserved one. Receive
// reads with XREADGROUP in the consumer group "ratekit" (created with
// MKSTREAM when missing), and first claims, with XAUTOCLAIM, an entry
// that another consumer has held longer than the visibility timeout: a
// worker that died. Ack acknowledges the entry (XACK) and deletes it
// (XDEL), so that the stream holds only items waiting or being served.
type Queue struct {
	client     redis.UniversalClient
	key        string
	max        int
	visibility time.Duration
	consumer   string
	block      time.Duration // of one XREADGROUP
	grouped    atomic.Bool   // the group exists, as far as we know
}

// group is the consumer group of every queue.
const group = "ratekit"

// pushScript adds an entry unless the stream holds ARGV[1] entries
// already: it returns the entry's ID, or false (nil) when full.
var pushScript = redis.NewScript(`
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
`)

// NewQueue returns the queue NAME (letters, digits and -_.:, at most 64
// bytes; never client text) on client. It does not call Redis: the first
// Receive creates the consumer group, which then reads the items pushed
// before it.
func NewQueue(client redis.UniversalClient, name string, o QueueOptions) (*Queue, error) {
	if client == nil {
		return nil, errors.New("redisstore: NewQueue needs a Redis client")
	}
	if !queueName(name) {
		return nil, fmt.Errorf("redisstore: queue name %q must be 1 to 64 bytes of letters, digits and \"-_.:\"", name)
	}
	if o.MaxLen < 1 || o.MaxLen > MaxQueueLen {
		return nil, fmt.Errorf("redisstore: queue MaxLen %d must be from 1 to %d", o.MaxLen, MaxQueueLen)
	}
	if o.Visibility == 0 {
		o.Visibility = DefaultVisibility
	}
	if o.Visibility < MinVisibility || o.Visibility > 24*time.Hour {
		return nil, fmt.Errorf("redisstore: queue visibility %s must be from %s to 24h", o.Visibility, MinVisibility)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := keys.CheckPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.Consumer == "" {
		o.Consumer, _ = os.Hostname()
		if !queueName(o.Consumer) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			o.Consumer = "c-" + hex.EncodeToString(b[:])
		}
	} else if !queueName(o.Consumer) {
		return nil, fmt.Errorf("redisstore: queue consumer %q must be 1 to 64 bytes of letters, digits and \"-_.:\"", o.Consumer)
	}
	return &Queue{client: client, key: o.Prefix + ":q:{" + name + "}", max: o.MaxLen,
		visibility: o.Visibility, consumer: o.Consumer, block: min(o.Visibility/2, time.Second)}, nil
}

// queueName reports whether s may name a queue or a consumer.
func queueName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

// makeGroup creates the consumer group, and the stream, if missing.
func (q *Queue) makeGroup(ctx context.Context) error {
	err := q.client.XGroupCreateMkStream(ctx, q.key, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstore: queue group: %w", err)
	}
	q.grouped.Store(true)
	return nil
}

// Push adds it to the stream, or returns queue.ErrFull.
func (q *Queue) Push(ctx context.Context, it *queue.Item) error {
	if it.ID == "" {
		return errors.New("redisstore: Push of an item without an ID")
	}
	header, err := json.Marshal(it.Header)
	if err != nil {
		return fmt.Errorf("redisstore: queue push: %w", err)
	}
	args := []any{q.max, "id", it.ID, "m", it.Method, "t", it.Target, "h", header, "b", it.Body,
		"e", it.Enqueued.UnixNano()}
	err = pushScript.Run(ctx, q.client, []string{q.key}, args...).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return queue.ErrFull
	case err != nil:
		return fmt.Errorf("redisstore: queue push: %w", err)
	}
	return nil
}

// Receive claims an item whose worker has held it past the visibility
// timeout, or else waits for a new one.
func (q *Queue) Receive(ctx context.Context) (*queue.Item, error) {
	regrouped := false
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !q.grouped.Load() {
			if err := q.makeGroup(ctx); err != nil {
				return nil, err
			}
		}
		it, err := q.claim(ctx)
		if err == nil && it == nil {
			var streams []redis.XStream
			streams, err = q.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: q.consumer,
				Streams: []string{q.key, ">"}, Count: 1, Block: q.block}).Result()
			switch {
			case errors.Is(err, redis.Nil):
				continue // nothing new within the block: claim again
			case err != nil && ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				err = fmt.Errorf("redisstore: queue receive: %w", err)
			case len(streams) > 0 && len(streams[0].Messages) > 0:
				return q.item(streams[0].Messages[0], 1)
			default:
				continue
			}
		}
		if err != nil && strings.Contains(err.Error(), "NOGROUP") && !regrouped {
			// The group is gone: Redis restarted empty, or the stream
			// was deleted. Make it again, once per call.
			q.grouped.Store(false)
			regrouped = true
			continue
		}
		return it, err
	}
}

// claim takes over one entry idle past the visibility timeout, if any.
// XAUTOCLAIM looks at ten entries of the pending list per call; claim
// follows its cursor through at most maxScans calls.
func (q *Queue) claim(ctx context.Context) (*queue.Item, error) {
	start := "0-0"
	for range maxScans {
		msgs, next, err := q.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: q.key, Group: group,
			Consumer: q.consumer, MinIdle: q.visibility, Start: start, Count: 1}).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: queue claim: %w", err)
		}
		if len(msgs) > 0 {
			attempt := 2
			p, err := q.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.key, Group: group,
				Start: msgs[0].ID, End: msgs[0].ID, Count: 1}).Result()
			if err == nil && len(p) == 1 {
				attempt = int(p[0].RetryCount)
			}
			return q.item(msgs[0], attempt)
		}
		if next == "0-0" || next == "" {
			return nil, nil
		}
		start = next
	}
	return nil, nil
}

// maxScans bounds the XAUTOCLAIM calls of one claim: 100 calls look at
// 1,000 pending entries, more than there are workers.
const maxScans = 100

// item decodes the entry m.
func (q *Queue) item(m redis.XMessage, attempt int) (*queue.Item, error) {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	it := &queue.Item{ID: str("id"), Method: str("m"), Target: str("t"), Body: []byte(str("b")),
		Attempt: attempt, Receipt: m.ID}
	if ns, err := strconv.ParseInt(str("e"), 10, 64); err == nil {
		it.Enqueued = time.Unix(0, ns)
	}
	if h := str("h"); h != "" && h != "null" {
		if err := json.Unmarshal([]byte(h), &it.Header); err != nil {
			it.Header = http.Header{}
		}
	}
	if it.ID == "" { // an entry that something else added
		it.ID = m.ID
	}
	return it, nil
}

// Ack acknowledges the item's entry and deletes it, in one transaction.
func (q *Queue) Ack(ctx context.Context, it *queue.Item) error {
	if it.Receipt == "" {
		return errors.New("redisstore: Ack of an item not received")
	}
	_, err := q.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, q.key, group, it.Receipt)
		p.XDel(ctx, q.key, it.Receipt)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: queue ack: %w", err)
	}
	return nil
}

// Len returns the number of items in the queue, waiting or leased.
func (q *Queue) Len(ctx context.Context) (int, error) {
	n, err := q.client.XLen(ctx, q.key).Result()
	return int(n), err
}

var _ queue.Queue = (*Queue)(nil)
