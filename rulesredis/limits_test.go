package rulesredis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// groups returns a document of n descriptors that only group (the
// cheapest to parse) after doc(10)'s rule: with n past
// rulesfile.MaxDescriptors, a document under MaxSize that every loader
// refuses.
func groups(n int) string {
	var b strings.Builder
	b.WriteString(doc(10))
	for i := range n {
		fmt.Fprintf(&b, "  - {key: generic_key, value: g%d}\n", i)
	}
	return b.String()
}

// A document past the descriptor cap, under MaxSize, is refused by
// Publish, by Watch at start, and by running watchers, which keep their
// rules and say why.
func TestDescriptorCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := client(t, srv)
	ctx := context.Background()
	over := groups(rulesfile.MaxDescriptors) // and doc(10)'s rule: one too many
	if len(over) > MaxSize {
		t.Fatalf("the document has %d bytes, over MaxSize", len(over))
	}
	const want = "more than 20000 descriptors, the most a rules document may hold (rulesfile.MaxDescriptors)"

	err := Publish(ctx, rdb, key, []byte(over), nil)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Publish: got %v, want %q", err, want)
	}
	if n, _ := rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("Publish stored a refused document")
	}

	if err := rdb.Set(ctx, key, over, 0).Err(); err != nil {
		t.Fatal(err)
	}
	e, err := rules.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	if w, err := Watch(e, rdb, key); err == nil || !strings.Contains(err.Error(), "redis:"+key+":") || !strings.Contains(err.Error(), want) {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Watch: got %v, want %q from redis:%s", err, want, key)
	}

	// A running watcher: the good version, then the one too large.
	publish(t, rdb, doc(10))
	// A read and a parse of the large document under -race on a busy
	// machine take longer than the harness's bounds.
	const slow = time.Minute
	in := watch(t, "server", client(t, srv), WithPollInterval(time.Hour), func(c *config) { c.timeout = slow })
	if got := in.limit(); got != "10" {
		t.Fatalf("limit %q, want 10", got)
	}
	if err := rdb.Set(ctx, key, strings.Replace(over, "requests_per_unit: 10", "requests_per_unit: 20", 1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(ctx, Channel(key), "x").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-in.hooks:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("reload: got %v, want %q", err, want)
		}
	case <-time.After(slow):
		t.Fatalf("no reload within %v; logs:\n%s", slow, in.logs)
	}
	if got := in.limit(); got != "10" {
		t.Errorf("limit %q after the refused version, want 10 kept", got)
	}
	if n := in.logs.count(want); n != 1 {
		t.Errorf("the refusal logged %d times, want once:\n%s", n, in.logs)
	}
}
