package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
	"github.com/ratekit/ratekit/redisstore/internal/servers"
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

	// PerKey is the most items of one client key (queue.Item.Key) the
	// queue holds, waiting or leased: from 1 to MaxLen. A push beyond it
	// is queue.ErrKeyFull, and the client gets the rejection it would
	// have got without a queue. Default queue.DefaultPerKey(MaxLen): 1%
	// of MaxLen, at least 1.
	PerKey int

	// Visibility is how long a received item stays leased to its worker:
	// past it, any worker may receive it again. Longer than a handler
	// takes. From MinVisibility to 24h; default DefaultVisibility. Leases
	// are timed by Redis's clock, not the servers'.
	Visibility time.Duration

	// Prefix starts the queue's keys (as WithPrefix of New; default
	// DefaultPrefix).
	Prefix string
}

// A Queue is a queue.Queue in Redis: every server of a fleet pushes to
// it and drains it, and an item outlives the process that pushed it and
// the one serving it.
//
// Its keys all start with PREFIX:q:{NAME}, one hash tag, so that they are
// in one Redis Cluster slot:
//
//	PREFIX:q:{NAME}:i        hash: item ID -> the item
//	PREFIX:q:{NAME}:k        hash: item ID -> its client's hash
//	PREFIX:q:{NAME}:a        hash: item ID -> its deliveries
//	PREFIX:q:{NAME}:n        hash: client hash -> its items held
//	PREFIX:q:{NAME}:r        list: the clients with items waiting, in turn
//	PREFIX:q:{NAME}:w:HASH   list: a client's items waiting, next first
//	PREFIX:q:{NAME}:l        sorted set: leased item ID -> end of lease
//	PREFIX:q:{NAME}:s        list: at most one token, to wake receivers
//
// A client's hash is 96 bits of the SHA-256 of its key, in base64url: a
// client key, attacker-controlled text, never appears in a key name
// (only in the item, as data). Each operation is one script, so that the
// bounds and the turn hold across a fleet. Push refuses an item past
// MaxLen or its client's PerKey rather than trimming any. Receive first
// puts back the items whose lease has ended (by Redis's clock), at the
// front of their client's items, then takes the next item of the client
// whose turn it is, and moves that client to the back of the turn.
// Ack deletes the item. Memory stays bounded: at most MaxLen items, each
// kept as its bytes and their lengths (see encodeItem), and structures
// only for the clients that hold items (an emptied list or hash is gone).
type Queue struct {
	client     redis.UniversalClient
	base       string
	max        int
	perKey     int
	visibility time.Duration
	block      time.Duration // of one wait for a push
}

// pushScript adds an item unless its ID is there already (-1), the queue
// is full (0) or its client's share is (1); 2 when added.
//
// KEYS: i, k, n, r, w:HASH, s; ARGV: max, perKey, id, hash, item.
var pushScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return -1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
if tonumber(redis.call('HGET', KEYS[3], ARGV[4]) or '0') >= tonumber(ARGV[2]) then return 1 end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
if redis.call('RPUSH', KEYS[5], ARGV[3]) == 1 then redis.call('RPUSH', KEYS[4], ARGV[4]) end
redis.call('RPUSH', KEYS[6], 1)
redis.call('LTRIM', KEYS[6], 0, 0)
return 2
`)

// receiveScript puts back the items whose lease has ended, then leases
// the next item of the client whose turn it is: it returns {id, item,
// deliveries}, or nil when none waits. A client is in the turn (r) as
// long as its list of items waiting is not empty.
//
// KEYS: i, k, a, r, l; ARGV: the prefix of w:HASH, visibility (ms).
var receiveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ended = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)
local joined = {}
for j = #ended, 1, -1 do
  local id = ended[j]
  redis.call('ZREM', KEYS[5], id)
  local h = redis.call('HGET', KEYS[2], id)
  if h and redis.call('LPUSH', ARGV[1] .. h, id) == 1 then table.insert(joined, 1, h) end
end
for _, h in ipairs(joined) do redis.call('RPUSH', KEYS[4], h) end
for _ = 1, 10 do
  local h = redis.call('LPOP', KEYS[4])
  if not h then return nil end
  local w = ARGV[1] .. h
  local id = redis.call('LPOP', w)
  if redis.call('LLEN', w) > 0 then redis.call('RPUSH', KEYS[4], h) end
  if id then
    local item = redis.call('HGET', KEYS[1], id)
    if item then
      redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), id)
      return {id, item, redis.call('HINCRBY', KEYS[3], id, 1)}
    end
  end
end
return nil
`)

// ackScript deletes an item, leased or waiting again; 0 when it is gone
// already.
//
// KEYS: i, k, a, n, r, l; ARGV: the prefix of w:HASH, id.
var ackScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[2], ARGV[2])
if not h then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if redis.call('ZREM', KEYS[6], ARGV[2]) == 0 then
  local w = ARGV[1] .. h
  redis.call('LREM', w, 1, ARGV[2])
  if redis.call('LLEN', w) == 0 then redis.call('LREM', KEYS[5], 1, h) end
end
if redis.call('HINCRBY', KEYS[4], h, -1) <= 0 then redis.call('HDEL', KEYS[4], h) end
return 1
`)

// NewQueue returns the queue NAME (letters, digits and -_.:, at most 64
// bytes; never client text) on client. It does not call Redis.
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
	if o.PerKey == 0 {
		o.PerKey = queue.DefaultPerKey(o.MaxLen)
	}
	if o.PerKey < 1 || o.PerKey > o.MaxLen {
		return nil, fmt.Errorf("redisstore: queue PerKey %d must be from 1 to MaxLen, %d", o.PerKey, o.MaxLen)
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
	return &Queue{client: client, base: o.Prefix + ":q:{" + name + "}", max: o.MaxLen, perKey: o.PerKey,
		visibility: o.Visibility, block: blockFor(client, o.Visibility)}, nil
}

// blockFor returns how long one wait of Receive for a push (BLPOP) may
// block on client: half the visibility timeout, so that a lease's end is
// seen soon, at most a second, and at most half the client's ReadTimeout,
// since go-redis reads the reply of a command sent with Do within it: a
// longer BLPOP would end in an i/o timeout (a closed connection, and a
// queue that fails whenever it is empty), not in a nil reply. At least a
// millisecond: BLPOP's timeout is sent with three decimals, and 0 would
// block for good.
func blockFor(client redis.UniversalClient, visibility time.Duration) time.Duration {
	block := min(visibility/2, time.Second)
	if rt := servers.ReadTimeout(client); rt > 0 {
		block = min(block, rt/2)
	}
	return max(block, time.Millisecond)
}

// queueName reports whether s may name a queue.
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

// clientHash is the name of a client key in the queue's keys: 96 bits of
// its SHA-256 in base64url, as the stores' hash tags (without the braces).
func clientHash(key string) string {
	tag := keys.ClientTag(key)
	return string(tag[1 : keys.HashLen+1])
}

// itemFormat is the first byte of an item as the queue keeps it.
const itemFormat = 1

// encodeItem returns it as the queue keeps it: itemFormat; its key,
// method and target; the time it was pushed (Unix nanoseconds, varint);
// its header fields (their count, then each name, the count of its
// values and the values); then its body, to the end. A text is its
// length (uvarint) and its bytes as they are, so that any bytes come back
// unchanged (JSON would turn invalid UTF-8 into U+FFFD) and the item takes
// about its own size (JSON made 6 bytes of each '<', '&' or byte over
// 0x7F, and 4 of every 3 of the body).
func encodeItem(it *queue.Item) []byte {
	n := 1 + 5*binary.MaxVarintLen64 + len(it.Key) + len(it.Method) + len(it.Target) + len(it.Body)
	for name, vs := range it.Header {
		n += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, itemFormat)
	b = appendText(b, it.Key)
	b = appendText(b, it.Method)
	b = appendText(b, it.Target)
	b = binary.AppendVarint(b, it.Enqueued.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(it.Header)))
	for name, vs := range it.Header {
		b = appendText(b, name)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendText(b, v)
		}
	}
	return append(b, it.Body...)
}

// appendText appends s, preceded by its length.
func appendText(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeItem reads data, written by encodeItem, into it; false when data
// is not such an item.
func decodeItem(data string, it *queue.Item) bool {
	if data == "" || data[0] != itemFormat {
		return false
	}
	r := itemReader{rest: data[1:]}
	it.Key, it.Method, it.Target = r.text(), r.text(), r.text()
	it.Enqueued = time.Unix(0, r.varint())
	names := r.count()
	if names > 0 {
		it.Header = make(http.Header, names)
	}
	for range names {
		name, values := r.text(), r.count()
		vs := make([]string, values)
		for i := range vs {
			vs[i] = r.text()
		}
		if r.bad {
			return false
		}
		it.Header[name] = vs
	}
	if r.bad {
		return false
	}
	if r.rest != "" {
		it.Body = []byte(r.rest)
	}
	return true
}

// An itemReader reads an item's parts off rest; bad tells that one was
// cut short.
type itemReader struct {
	rest string
	bad  bool
}

func (r *itemReader) uvarint() uint64 {
	v, n := binary.Uvarint([]byte(r.rest[:min(len(r.rest), binary.MaxVarintLen64)]))
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.rest = r.rest[n:]
	return v
}

func (r *itemReader) varint() int64 {
	v, n := binary.Varint([]byte(r.rest[:min(len(r.rest), binary.MaxVarintLen64)]))
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.rest = r.rest[n:]
	return v
}

// count reads a count of parts that follow, each at least a byte long:
// one larger than the bytes left is bad.
func (r *itemReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.rest)) {
		r.bad = true
		return 0
	}
	return int(n)
}

func (r *itemReader) text() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.rest)) {
		r.bad = true
		return ""
	}
	s := r.rest[:n]
	r.rest = r.rest[n:]
	return s
}

// Push adds it to the queue, or returns queue.ErrKeyFull or
// queue.ErrFull.
func (q *Queue) Push(ctx context.Context, it *queue.Item) error {
	if it.ID == "" {
		return errors.New("redisstore: Push of an item without an ID")
	}
	b := encodeItem(it)
	h := clientHash(it.Key)
	n, err := pushScript.Run(ctx, q.client, []string{q.base + ":i", q.base + ":k", q.base + ":n", q.base + ":r",
		q.base + ":w:" + h, q.base + ":s"}, q.max, q.perKey, it.ID, h, b).Int()
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: queue push: %w", err)
	case n == 0:
		return queue.ErrFull
	case n == 1:
		return queue.ErrKeyFull
	case n < 0:
		return fmt.Errorf("redisstore: an item with ID %q is in the queue already", it.ID)
	}
	return nil
}

// Receive takes the next item in turn, putting back first the items
// whose lease has ended; it waits for a push, or a lease's end, when none
// waits.
func (q *Queue) Receive(ctx context.Context) (*queue.Item, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res, err := receiveScript.Run(ctx, q.client, []string{q.base + ":i", q.base + ":k", q.base + ":a", q.base + ":r", q.base + ":l"},
			q.base+":w:", q.visibility.Milliseconds()).Slice()
		switch {
		case errors.Is(err, redis.Nil):
			// None waits: wait for a push's token, or long enough to see a
			// lease end.
			// (BLPOP takes fractions of a second; go-redis's BLPop rounds
			// them up to one.)
			err = q.client.Do(ctx, "BLPOP", q.base+":s", strconv.FormatFloat(q.block.Seconds(), 'f', 3, 64)).Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("redisstore: queue receive: %w", err)
			}
			continue
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("redisstore: queue receive: %w", err)
		}
		return q.item(res)
	}
}

// item decodes the reply of receiveScript.
func (q *Queue) item(res []any) (*queue.Item, error) {
	if len(res) != 3 {
		return nil, fmt.Errorf("redisstore: queue receive: a reply of %d elements", len(res))
	}
	id, _ := res[0].(string)
	data, _ := res[1].(string)
	attempt, _ := res[2].(int64)
	it := &queue.Item{ID: id, Attempt: int(attempt), Receipt: id}
	if !decodeItem(data, it) {
		// Not written by Push: the worker answers it 400 and gives it up,
		// logged.
		*it = queue.Item{ID: id, Target: "?unreadable", Attempt: int(attempt), Receipt: id}
	}
	return it, nil
}

// Ack deletes the item, leased or waiting again.
func (q *Queue) Ack(ctx context.Context, it *queue.Item) error {
	if it.Receipt == "" {
		return errors.New("redisstore: Ack of an item not received")
	}
	err := ackScript.Run(ctx, q.client, []string{q.base + ":i", q.base + ":k", q.base + ":a", q.base + ":n", q.base + ":r", q.base + ":l"},
		q.base+":w:", it.Receipt).Err()
	if err != nil {
		return fmt.Errorf("redisstore: queue ack: %w", err)
	}
	return nil
}

// Len returns the number of items in the queue, waiting or leased.
func (q *Queue) Len(ctx context.Context) (int, error) {
	n, err := q.client.HLen(ctx, q.base+":i").Result()
	return int(n), err
}

var _ queue.Queue = (*Queue)(nil)
