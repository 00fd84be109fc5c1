package rulesredis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rules"
	"github.com/redis/go-redis/v9"
)

// TestPublish: Publish refuses what Parse or check refuses, and what is
// too large, storing and announcing nothing; a valid document is stored
// and announced, with its SHA-256, on Channel(key).
func TestPublish(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	ctx := context.Background()
	sub := client(t, srv).Subscribe(ctx, Channel(key))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	scratch, err := rules.NewEngine() // knows no "plan" key
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		data string
		want string
	}{
		{"invalid YAML", "domain: [\n", "redis:" + key + ":1: invalid YAML"},
		{"unknown field", "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n", "redis:" + key + `:4: descriptors[0]: unknown key "rate_limt"`},
		{"refused by check", doc(5) + "  - key: plan\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "redis:" + key + `:7: descriptors[1].key: unknown descriptor key "plan"`},
		{"too large", strings.Repeat(" ", MaxSize+1), "rulesredis: rules document larger than 4 MiB: the document has 4194305 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Publish(ctx, rdb, key, []byte(tc.data), scratch.Load)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Publish: got %v, want an error with %q", err, tc.want)
			}
			if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("the key exists (%d, %v)", n, err)
			}
		})
	}
	if err := Publish(ctx, rdb, key, make([]byte, MaxSize+1), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Publish of MaxSize+1 bytes: got %v, want ErrTooLarge", err)
	}
	if err := Publish(ctx, nil, key, []byte(doc(1)), nil); err == nil {
		t.Error("Publish with a nil client did not fail")
	}
	if err := Publish(ctx, rdb, "", []byte(doc(1)), nil); err == nil {
		t.Error("Publish to an empty key did not fail")
	}

	data := doc(7)
	if err := Publish(ctx, rdb, key, []byte(data), scratch.Load); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != data {
		t.Errorf("the key holds %q, %v", got, err)
	}
	// The first message is this document's: the refused ones sent none.
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(data))
	if msg.Channel != key+":changed" || msg.Payload != hex.EncodeToString(sum[:]) {
		t.Errorf("message %q on %q, want the document's SHA-256 on %q", msg.Payload, msg.Channel, key+":changed")
	}

	addr := srv.Addr()
	srv.Stop(t)
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer down.Close()
	if err := Publish(ctx, down, key, []byte(data), nil); err == nil || !strings.HasPrefix(err.Error(), `rulesredis: storing "`+key+`": `) {
		t.Errorf("Publish with Redis down: got %v", err)
	}
}
