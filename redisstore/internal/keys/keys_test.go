package keys_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/keys"
)

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"rk", "app:v2", "a-b_c.d/e:F9", strings.Repeat("p", keys.MaxPrefix)} {
		if err := keys.CheckPrefix(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "a{b}", "a}", "a b", "a*", "a\n", "é", strings.Repeat("p", keys.MaxPrefix+1)} {
		if err := keys.CheckPrefix(p); err == nil {
			t.Errorf("%q: no error", p)
		}
	}
}

func TestClientTag(t *testing.T) {
	a, b := keys.ClientTag("203.0.113.9"), keys.ClientTag(strings.Repeat("x", 10_000))
	for _, tag := range [][keys.HashLen + 2]byte{a, b} {
		s := string(tag[:])
		if s[0] != '{' || s[len(s)-1] != '}' || strings.ContainsAny(s[1:len(s)-1], "{}") {
			t.Errorf("tag %q is not one hash tag", s)
		}
	}
	if a == b || a != keys.ClientTag("203.0.113.9") {
		t.Errorf("tags of two keys %q %q; of one key twice %q", a, b, keys.ClientTag("203.0.113.9"))
	}
}

func TestTags(t *testing.T) {
	var tags keys.Tags
	p, err := core.Limit{Name: "api", Rate: core.PerMinute(10)}.Params(time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	q, err := core.Limit{Name: "api", Rate: core.PerMinute(20)}.Params(time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tags.Limit(&p)
	if err != nil || len(a) != keys.TagLen {
		t.Fatalf("tag %q, %v", a, err)
	}
	// The same name, algorithm and period, in any unit and at any count:
	// the same tag, so the same counters.
	if b, err := tags.Limit(&q); err != nil || b != a {
		t.Errorf("tag %q, %v; want %q", b, err, a)
	}
	if c, err := tags.Of("concurrency:api"); err != nil || c == a {
		t.Errorf("tag %q, %v; want another than %q", c, err, a)
	}
}
