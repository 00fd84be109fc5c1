package rules_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/rules"
)

type fuzzUserKey struct{}

var errPlanDown = errors.New("plan backend down")

// fuzzRules uses every built-in descriptor key, a custom one, matches on
// methods and path patterns, exact and wildcard values, nesting, an
// unlimited exemption, a block list entry and replaces. So that the
// properties FuzzMatcher checks hold, method and route are leaves at the
// top, a Match that selects HEAD without GET is at the top and replaces no
// limit, and the rules that replace are at the top.
func fuzzRules() rules.Config {
	per := func(unit string, n int) *rules.RateLimit { return &rules.RateLimit{Unit: unit, RequestsPerUnit: n} }
	return rules.Config{Domain: "fuzz", Descriptors: []rules.Descriptor{
		{Key: "remote_address", Match: &rules.Match{Methods: []string{"POST"}, Path: "/login"}, RateLimit: per("minute", 5)},
		{Key: "remote_address", Value: "192.0.2.66", RateLimit: per("second", 0)},
		{Key: "remote_address", Value: "2001:db8:1:2::/64", RateLimit: &rules.RateLimit{Unlimited: true}},
		{Key: "remote_address", RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 10, Name: "per-ip"},
			Descriptors: []rules.Descriptor{
				{Key: "header:X-API-Key", RateLimit: per("minute", 100), Descriptors: []rules.Descriptor{
					{Key: "path", Value: "/admin", RateLimit: per("minute", 1)},
					{Key: "path", Value: "/static/*", ShareThreshold: true, RateLimit: per("hour", 1000)},
				}},
				{Key: "header:X-API-Key", Value: "test-*-key", ShadowMode: true, RateLimit: per("minute", 1)},
			}},
		{Key: "header:X-Partner", RateLimit: &rules.RateLimit{Unlimited: true, Replaces: []string{"per-ip"}}},
		{Key: "generic_key", Value: "reviews", Match: &rules.Match{Methods: []string{"GET", "head"}, Path: "/items/*/reviews"}, RateLimit: per("minute", 1)},
		{Key: "generic_key", Value: "head-only", Match: &rules.Match{Methods: []string{"HEAD"}, Path: "/api/*"}, RateLimit: per("minute", 1)},
		{Key: "generic_key", Value: "api", Match: &rules.Match{Path: "/api/*"}, RateLimit: per("second", 50),
			Descriptors: []rules.Descriptor{
				{Key: "query:token", RateLimit: per("minute", 20)},
				{Key: "header:X-Tenant", Value: "acme*", ShareThreshold: true, RateLimit: per("minute", 500)},
				{Key: "header:X-Tenant", Value: "*-beta*", RateLimit: per("minute", 5)},
				{Key: "header:X-Tenant", Value: "gold", RateLimit: &rules.RateLimit{Unlimited: true}},
				{Key: "header:X-Tenant", RateLimit: per("minute", 50)},
			}},
		{Key: "generic_key", Value: "root", Match: &rules.Match{Path: "/"}, RateLimit: per("minute", 1)},
		{Key: "method", Value: "DELETE", RateLimit: per("minute", 3)},
		{Key: "route", RateLimit: per("minute", 1000)},
		{Key: "user", RateLimit: per("day", 10000), Descriptors: []rules.Descriptor{
			{Key: "plan", Value: "free", RateLimit: per("minute", 10)},
			{Key: "plan", RateLimit: &rules.RateLimit{Unlimited: true}},
		}},
		{Key: "query:q", Value: "*", RateLimit: per("second", 2)},
	}}
}

// fuzzEngine returns an engine with fuzzRules, Cascade as given.
func fuzzEngine(tb testing.TB, cascade bool) *rules.Engine {
	tb.Helper()
	e, err := rules.NewEngine(rules.WithClientIP(keyfuncs.TrustedProxies("10.0.0.0/8", "fd00::/8")), rules.WithUserKey(fuzzUserKey{}),
		rules.WithKey("plan", func(r rules.Request) (string, error) {
			switch v := r.Values("X-Plan"); {
			case len(v) == 0:
				return "", keyfuncs.ErrMissing
			case v[0] == "down":
				return "", errPlanDown
			default:
				return v[0], nil
			}
		}))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := fuzzRules()
	cfg.Cascade = cascade
	if err := e.Load(cfg); err != nil {
		tb.Fatal(err)
	}
	return e
}

// fuzzCleanPath is what the package documents it matches: the path,
// rooted, cleaned by path.Clean.
func fuzzCleanPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p)
}

type match struct {
	names, keys []string
	err         error
}

func matches(e *rules.Engine, r *http.Request) match {
	names, keys, err := e.Matches(rules.HTTPRequest(r))
	return match{names, keys, err}
}

// subset reports whether every name of a is among b's.
func subset(a, b []string) bool {
	for _, n := range a {
		if !slices.Contains(b, n) {
			return false
		}
	}
	return true
}

// FuzzMatcher decides arbitrary requests (method, path and its escaped
// form, query, route pattern, peer, headers, user) by a config that uses
// every kind of descriptor, with and without Cascade:
//
//   - it never panics, and the same request gets the same limits and keys,
//     by Matches and by Checks; an error is only the failing key
//     function's, and then there are no checks;
//   - every limit name is the domain's, at most 64 bytes, of the
//     characters limit names allow, with a non-empty key;
//   - the path is matched cleaned: a path and its path.Clean form get the
//     same limits;
//   - a HEAD gets every limit a GET gets (a GET rule covers HEAD);
//   - the limits without Cascade are among those with it;
//   - Lookup of the request's own entries never panics and is
//     deterministic.
func FuzzMatcher(f *testing.F) {
	f.Add("POST", "/login", "", "", "", "10.0.0.1:443", "203.0.113.7, 10.0.0.2", "k-123", "", "", uint8(0))
	f.Add("GET", "/api/v1/items", "", "token=abc&q=x", "GET /api/{rest...}", "192.0.2.66:1", "", "", "acme-corp", "alice", uint8(7))
	f.Add("HEAD", "/items/7/reviews/", "", "", "", "[2001:db8:1:2::99]:80", "", "", "x-beta-1", "", uint8(1))
	f.Add("GET", "/users/1/x", "/users/1%2Fx", "", "", "[fe80::1%eth0]:1", "", "test-a-key", "gold", "bob", uint8(2))
	f.Add("DELETE", "//admin/../admin/./", "", "token=%zz&token=2", "", "10.1.1.1:5", "for=1.2.3.4, ::ffff:10.0.0.9", "key", "", "", uint8(3))
	f.Add("", "", "", "", "", "", "", "", "", "", uint8(255))
	f.Add("G\x00ET", "static/../../../etc/passwd", "%2e%2e/%2E%2e", ";;;&&&==", "\t", "@", "\xff", "\xff", "\xff", "\xff", uint8(4))
	f.Add("get", "/static/"+strings.Repeat("a/", 300), "", "q="+strings.Repeat("%41", 200), "", "10.0.0.1:1", strings.Repeat("10.0.0.1,", 200), "down", "", "", uint8(6))
	engines := map[bool]*rules.Engine{false: fuzzEngine(f, false), true: fuzzEngine(f, true)}
	f.Fuzz(func(t *testing.T, method, urlPath, rawPath, rawQuery, pattern, remote, xff, apiKey, tenant, user string, flags uint8) {
		build := func(method, urlPath, rawPath string) *http.Request {
			h := http.Header{}
			if xff != "" {
				h.Add("X-Forwarded-For", xff)
			}
			if apiKey != "" {
				h.Add("X-API-Key", apiKey)
			}
			if tenant != "" {
				h.Add("X-Tenant", tenant)
			}
			if flags&1 != 0 {
				h.Add("X-Partner", "p")
			}
			if flags&2 != 0 {
				h.Add("X-Plan", apiKey)
			}
			ctx := context.Background()
			if flags&4 != 0 {
				ctx = context.WithValue(ctx, fuzzUserKey{}, user)
			}
			r := &http.Request{Method: method, URL: &url.URL{Path: urlPath, RawPath: rawPath, RawQuery: rawQuery},
				Header: h, RemoteAddr: remote, Pattern: pattern}
			return r.WithContext(ctx)
		}
		for _, cascade := range []bool{false, true} {
			e := engines[cascade]
			r := build(method, urlPath, rawPath)
			m := matches(e, r)
			if again := matches(e, r); !reflect.DeepEqual(m, again) {
				t.Fatalf("Matches not deterministic: %+v, then %+v", m, again)
			}
			var buf [4]core.Check
			checks, err := e.Checks(rules.HTTPRequest(r), buf[:0])
			if (err == nil) != (m.err == nil) {
				t.Fatalf("Checks: %v; Matches: %v", err, m.err)
			}
			if err != nil {
				// The plan key's failure, or remote_address refusing a
				// peer without a port (a header rewritten into RemoteAddr).
				rewritten := errors.Is(err, keyfuncs.ErrMisconfigured) && clientip.CheckRemoteAddr(remote) != nil
				if !errors.Is(err, errPlanDown) && !rewritten || len(checks) != 0 || len(m.names) != 0 {
					t.Fatalf("error %v, with checks %v and limits %q", err, checks, m.names)
				}
				continue
			}
			if len(checks) != len(m.names) || len(m.keys) != len(m.names) {
				t.Fatalf("%d checks, limits %q keys %q", len(checks), m.names, m.keys)
			}
			for i, n := range m.names {
				if !strings.HasPrefix(n, "fuzz/") || len(n) > 64 ||
					strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"+core.NameSymbols) != "" {
					t.Fatalf("limit name %q", n)
				}
				if m.keys[i] == "" || checks[i].Key != m.keys[i] || checks[i].Limiter == nil {
					t.Fatalf("limit %q: key %q, check %+v", n, m.keys[i], checks[i])
				}
			}
			if rawPath == "" {
				if c := matches(e, build(method, fuzzCleanPath(urlPath), "")); !reflect.DeepEqual(m, c) {
					t.Fatalf("path %q gets %+v, cleaned %q %+v", urlPath, m, fuzzCleanPath(urlPath), c)
				}
			}
			get, head := matches(e, build(http.MethodGet, urlPath, rawPath)), matches(e, build(http.MethodHead, urlPath, rawPath))
			if get.err == nil && head.err == nil && !subset(get.names, head.names) {
				t.Fatalf("GET gets %q, HEAD %q", get.names, head.names)
			}
			if !cascade {
				if c := matches(engines[true], r); c.err == nil && !subset(m.names, c.names) {
					t.Fatalf("limits %q without Cascade, %q with it", m.names, c.names)
				}
			}
			entries := []rules.Entry{{Key: "remote_address", Value: remote}, {Key: "header:X-API-Key", Value: apiKey}, {Key: "path", Value: urlPath}}
			for n := range len(entries) + 1 {
				a, ok := e.Lookup("fuzz", entries[:n]...)
				b, ok2 := e.Lookup("fuzz", entries[:n]...)
				if ok != ok2 || !reflect.DeepEqual(a, b) || (!ok && !reflect.DeepEqual(a, rules.Applied{})) {
					t.Fatalf("Lookup(%q) = %+v, %v then %+v, %v", entries[:n], a, ok, b, ok2)
				}
				if ok && (a.Limit == "") != a.RateLimit.Unlimited {
					t.Fatalf("Lookup(%q) = %+v", entries[:n], a)
				}
			}
		}
	})
}

// TestLoadErrorsBounded is the regression test of what FuzzParseLoad (in
// rulesfile) found: Load quoted every value whole in its messages and
// reported every error, so a small file whose alias repeats a long key
// gave megabytes of errors. Now values are cut to 40 characters and Load
// stops at 100 errors, saying so.
func TestLoadErrorsBounded(t *testing.T) {
	e, err := rules.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 5000)
	var ds []rules.Descriptor
	for range 300 {
		ds = append(ds, rules.Descriptor{Key: long})
	}
	err = e.Load(rules.Config{Source: "r.yaml", Domain: "d", Descriptors: ds})
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) != 101 || errs[100].Error() != "r.yaml: descriptors[100].key: too many errors" {
		t.Fatalf("%d errors, the last %v; want 100 and one saying there are too many", len(errs), errs[len(errs)-1])
	}
	want := `r.yaml: descriptors[0].key: unknown descriptor key "` + strings.Repeat("é", 40) + `..." (built in:`
	if !strings.HasPrefix(errs[0].Error(), want) || len(errs[0].Error()) > 1024 {
		t.Errorf("error %.200q..., want it to start %q", errs[0].Error(), want)
	}

	per := func(rl rules.RateLimit) *rules.RateLimit { return &rl }
	for _, tc := range []struct {
		d    rules.Descriptor
		want string
	}{
		{rules.Descriptor{Key: "header:" + long}, `header name "éééé`},
		{rules.Descriptor{Key: "path", Descriptors: []rules.Descriptor{{Key: "path", Value: long}, {Key: "path", Value: long}}}, `duplicate descriptor: key "path", value "éééé`},
		{rules.Descriptor{Key: "path", RateLimit: per(rules.RateLimit{Unit: long, RequestsPerUnit: 1})}, `unit "éééé`},
		{rules.Descriptor{Key: "path", RateLimit: per(rules.RateLimit{Unit: "second", RequestsPerUnit: 1, Algorithm: long})}, `ratekit: unknown algorithm "éééé`},
		{rules.Descriptor{Key: "path", RateLimit: per(rules.RateLimit{Unit: "second", RequestsPerUnit: 1, Replaces: []string{long}})}, `no rate limit is named "éééé`},
		{rules.Descriptor{Key: "path", Match: &rules.Match{Path: "/" + long + "/"}}, `path "/éééé`},
		{rules.Descriptor{Key: "path", Match: &rules.Match{Methods: []string{long}}}, `method "ÉÉÉÉ`},
	} {
		err := e.Load(rules.Config{Source: "r.yaml", Domain: "d", Descriptors: []rules.Descriptor{tc.d}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `..."`) || len(err.Error()) > 1024 {
			t.Errorf("Load: error %.300q, want one with %q, cut", err, tc.want)
		}
	}

	// A name used twice, deep down: the message names the first use by
	// the end of its path.
	deep := rules.Descriptor{Key: "path", RateLimit: per(rules.RateLimit{Unit: "second", RequestsPerUnit: 1, Name: "n"})}
	for range 100 {
		deep = rules.Descriptor{Key: "path", Descriptors: []rules.Descriptor{deep}}
	}
	err = e.Load(rules.Config{Source: "r.yaml", Domain: "d", Descriptors: []rules.Descriptor{deep,
		{Key: "method", RateLimit: per(rules.RateLimit{Unit: "second", RequestsPerUnit: 1, Name: "n"})}}})
	var re *rules.Error
	if !errors.As(err, &re) || !strings.HasPrefix(re.Msg, `name "n" is already used by ...`) ||
		!strings.HasSuffix(re.Msg, ".descriptors[0].rate_limit") || len(re.Msg) > 300 {
		t.Errorf("Load: error %v", err)
	}
}

// TestMatchesErrorNoLimits is the regression test of what FuzzMatcher
// found: when a key function failed, Matches returned its error together
// with the limits matched before it, which Checks never applies (the
// request fails, 500); now it returns the error alone, as Checks does.
func TestMatchesErrorNoLimits(t *testing.T) {
	e := fuzzEngine(t, false)
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/0"}, RemoteAddr: "192.0.2.1:1",
		Header: http.Header{"X-Plan": {"down"}}}
	r = r.WithContext(context.WithValue(context.Background(), fuzzUserKey{}, "0"))
	names, keys, err := e.Matches(rules.HTTPRequest(r))
	if !errors.Is(err, errPlanDown) || names != nil || keys != nil {
		t.Errorf("Matches = %q, %q, %v; want only the error", names, keys, err)
	}
	checks, err := e.Checks(rules.HTTPRequest(r), nil)
	if !errors.Is(err, errPlanDown) || len(checks) != 0 {
		t.Errorf("Checks = %v, %v; want only the error", checks, err)
	}
}
