package rulesredis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/redis/go-redis/v9"
)

// Publish stores data, a rules document, under key for every Watcher of
// the key, after checking it: it must be at most MaxSize bytes, Parse must
// accept it (with source "redis:KEY", as the watchers parse it), and so
// must check, if not nil. Then Publish sets the key (without expiry) and
// publishes the document's SHA-256, in hex, on Channel(key), so that the
// watchers read it at once.
//
// Parse checks the document's shape only; check is where its meaning is
// checked, usually by the Load method of a scratch rules.Engine made with
// the options of the application's engines (the same descriptor keys:
// rules.WithKey, rules.WithUserKey), so that a document the servers would
// refuse is refused here, before any server sees it. Without check such a
// document is stored, and every watcher refuses it and keeps its rules.
//
// A refused document is not stored, and Publish returns the errors of
// Parse or check (each a *rules.Error for a problem in the document). If
// the key is set but the message cannot be published, Publish returns an
// error that says so; the watchers then load the document at their next
// poll.
func Publish(ctx context.Context, rdb redis.UniversalClient, key string, data []byte, check func(rules.Config) error) error {
	switch {
	case rdb == nil:
		return errors.New("rulesredis: Publish: nil Redis client")
	case key == "":
		return errors.New("rulesredis: Publish: empty key")
	case len(data) > MaxSize:
		return fmt.Errorf("%w: the document has %d bytes", ErrTooLarge, len(data))
	}
	cfg, err := rulesfile.Parse(source(key), data)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(cfg); err != nil {
			return err
		}
	}
	if err := rdb.Set(ctx, key, data, 0).Err(); err != nil {
		return fmt.Errorf("rulesredis: storing %q: %w", key, err)
	}
	sum := sha256.Sum256(data)
	if err := rdb.Publish(ctx, Channel(key), hex.EncodeToString(sum[:])).Err(); err != nil {
		return fmt.Errorf("rulesredis: %q stored, but announcing it on %q failed (watchers load it at their next poll): %w", key, Channel(key), err)
	}
	return nil
}
