package rulesfile_test

// The cases of the Envoy rate-limit service's own config tests
// (envoyproxy/ratelimit, test/config: its config files, written out in
// testdata/envoy, and the lookups its config_test.go makes of them, each
// with Envoy's expected answer), run against rules.Engine.Lookup, which
// answers as Envoy's service does for a descriptor list. The lookups of
// the newer wildcard semantics (a "*" anywhere in a value) and of
// share_threshold follow the rules Envoy documents for them.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// envoyEngine loads testdata/envoy/name into an engine that knows every
// descriptor key the file uses, as Envoy's service knows any key.
func envoyEngine(t *testing.T, name string) *rules.Engine {
	t.Helper()
	path := filepath.Join("testdata", "envoy", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rulesfile.Parse(name, data)
	if err != nil {
		t.Fatalf("Envoy's %s does not parse: %v", name, err)
	}
	keys := map[string]bool{}
	var walk func([]rules.Descriptor)
	walk = func(ds []rules.Descriptor) {
		for _, d := range ds {
			keys[d.Key] = true
			walk(d.Descriptors)
		}
	}
	walk(cfg.Descriptors)
	opts := []rules.Option{rules.WithUserKey("user")}
	for k := range keys {
		switch k {
		case "user", "path", "route", "method", "remote_address", "generic_key":
		default:
			opts = append(opts, rules.WithKey(k, func(rules.Request) (string, error) { return "", nil }))
		}
	}
	e, err := rules.NewEngine(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(cfg); err != nil {
		t.Fatalf("Envoy's %s does not load: %v", name, err)
	}
	return e
}

// entries builds a descriptor from "key=value" pairs.
func entries(pairs ...string) []rules.Entry {
	es := make([]rules.Entry, 0, len(pairs))
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		es = append(es, rules.Entry{Key: k, Value: v})
	}
	return es
}

// want is an expected lookup: none, or a limit of n per unit.
type want struct {
	n         int
	unit      string
	unlimited bool
	shadow    bool
}

var none = want{}

type lookupCase struct {
	domain string // "" is test-domain
	desc   []string
	want   want
	// sameAs, when set, names another descriptor (by its index in the
	// table) that must share this one's counter; apart, one that must not.
	sameAs, apart int
}

func runLookups(t *testing.T, e *rules.Engine, cases []lookupCase) {
	t.Helper()
	got := make([]rules.Applied, len(cases))
	for i, c := range cases {
		domain := c.domain
		if domain == "" {
			domain = "test-domain"
		}
		a, ok := e.Lookup(domain, entries(c.desc...)...)
		got[i] = a
		switch {
		case c.want == none:
			if ok {
				t.Errorf("case %d %v: got %d/%s, want no limit", i, c.desc, a.RateLimit.RequestsPerUnit, a.RateLimit.Unit)
			}
			continue
		case !ok:
			t.Errorf("case %d %v: no limit, want %+v", i, c.desc, c.want)
			continue
		}
		rl := a.RateLimit
		if c.want.unlimited != rl.Unlimited || !rl.Unlimited && (rl.RequestsPerUnit != c.want.n || !strings.EqualFold(rl.Unit, c.want.unit)) {
			t.Errorf("case %d %v: got %d/%s unlimited=%v, want %+v", i, c.desc, rl.RequestsPerUnit, rl.Unit, rl.Unlimited, c.want)
		}
		if a.Shadow != c.want.shadow {
			t.Errorf("case %d %v: shadow %v, want %v", i, c.desc, a.Shadow, c.want.shadow)
		}
		if !rl.Unlimited && a.Limit == "" {
			t.Errorf("case %d %v: no counting limit named", i, c.desc)
		}
	}
	for i, c := range cases {
		if c.sameAs > 0 && (got[i].Limit != got[c.sameAs-1].Limit || got[i].Key != got[c.sameAs-1].Key) {
			t.Errorf("case %d %v: counter %s %q, want case %d's %s %q", i, c.desc, got[i].Limit, got[i].Key, c.sameAs-1, got[c.sameAs-1].Limit, got[c.sameAs-1].Key)
		}
		if c.apart > 0 && got[i].Limit == got[c.apart-1].Limit && got[i].Key == got[c.apart-1].Key {
			t.Errorf("case %d %v: shares case %d's counter %s %q", i, c.desc, c.apart-1, got[i].Limit, got[i].Key)
		}
	}
}

// ref names case i of a table for sameAs and apart.
func ref(i int) int { return i + 1 }

func TestEnvoyBasicConfig(t *testing.T) {
	e := envoyEngine(t, "basic_config.yaml")
	runLookups(t, e, []lookupCase{
		{domain: "foo_domain", want: none},
		{want: none}, // an empty descriptor
		{desc: []string{"key1=something"}, want: none},
		{desc: []string{"key1=value1"}, want: none}, // no limit of its own
		{desc: []string{"key2=value2", "subkey=subvalue"}, want: none},
		{desc: []string{"key5=value5", "subkey5=subvalue"}, want: none},
		{desc: []string{"key1=value1", "subkey1=something"}, want: want{n: 5, unit: "second"}},
		{desc: []string{"key1=value1", "subkey1=subvalue1"}, want: want{n: 10, unit: "second"}},
		{desc: []string{"key2=something"}, want: want{n: 20, unit: "minute"}},
		{desc: []string{"key2=value2"}, want: want{n: 30, unit: "minute"}},
		{desc: []string{"key2=value3"}, want: none}, // a value without a limit does not fall back to the key's
		{desc: []string{"key3=foo"}, want: want{n: 1, unit: "hour"}},
		{desc: []string{"key4=foo"}, want: want{n: 1, unit: "day"}},
		{desc: []string{"key6=foo"}, want: want{unlimited: true}},
		{desc: []string{"key7=unspecified_value"}, want: want{n: 70, unit: "minute"}},
		{desc: []string{"key7=another_value"}, want: want{n: 70, unit: "minute"}, apart: ref(14)},
		// Envoy matches an empty value against the descriptor without a value.
		{desc: []string{"key2="}, want: want{n: 20, unit: "minute"}},
		{desc: []string{"key5=value5"}, want: want{n: 15, unit: "day"}},
		{desc: []string{"key5=value5", "subkey5=subvalue5"}, want: want{n: 25, unit: "day"}},
	})
}

func TestEnvoyShadowModeConfig(t *testing.T) {
	e := envoyEngine(t, "shadowmode_config.yaml")
	runLookups(t, e, []lookupCase{
		{desc: []string{"key1=value1", "subkey1=something"}, want: want{n: 5, unit: "second"}},
		{desc: []string{"key1=value1", "subkey1=subvalue1"}, want: want{n: 10, unit: "second", shadow: true}},
		{desc: []string{"key2=something"}, want: want{n: 20, unit: "minute", shadow: true}},
		{desc: []string{"key2=value2"}, want: want{n: 30, unit: "minute"}},
	})
}

func TestEnvoyWildcardConfig(t *testing.T) {
	e := envoyEngine(t, "wildcard.yaml")
	m20 := want{n: 20, unit: "minute"}
	runLookups(t, e, []lookupCase{
		{desc: []string{"noVal=foo1"}, want: m20},
		{desc: []string{"noVal=foo2"}, want: m20, apart: ref(0)},
		{desc: []string{"wild=foo1"}, want: m20},
		{desc: []string{"wild=foo2"}, want: m20, apart: ref(2)}, // one limit, a counter per value
		{desc: []string{"wild=bar"}, want: none},
		{desc: []string{"noWild=foo1"}, want: none},
		{desc: []string{"midWildcard=barab"}, want: none}, // no such key
		{desc: []string{"midWild=barab"}, want: m20},
		{desc: []string{"midWild=barb"}, want: m20},
		{desc: []string{"midWild=bar"}, want: none},
		{desc: []string{"multiWild=fooXbarYbaz"}, want: m20},
		{desc: []string{"multiWild=foobarbaz"}, want: m20},
		{desc: []string{"multiWild=fooXbaz"}, want: none},
		{desc: []string{"multiWild=fooXbarYbazZ"}, want: none},
		{desc: []string{"trailWild=foobar"}, want: m20},
		{desc: []string{"trailWild=foo-bar-anything"}, want: m20},
		{desc: []string{"trailWild=fobar"}, want: none},
	})
}

func TestEnvoyShareThreshold(t *testing.T) {
	e := envoyEngine(t, "share_threshold.yaml")
	runLookups(t, e, []lookupCase{
		/* 0 */ {desc: []string{"files=files/a.txt"}, want: want{n: 100, unit: "minute"}},
		/* 1 */ {desc: []string{"files=files/b/c.txt"}, want: want{n: 100, unit: "minute"}, sameAs: ref(0)},
		/* 2 */ {desc: []string{"nested=parent", "files=nested/a"}, want: want{n: 200, unit: "minute"}},
		/* 3 */ {desc: []string{"nested=parent", "files=nested/b"}, want: want{n: 200, unit: "minute"}, sameAs: ref(2)},
		/* 4 */ {desc: []string{"files=top/a", "files=nested/x"}, want: want{n: 300, unit: "minute"}},
		/* 5 */ {desc: []string{"files=top/b", "files=nested/y"}, want: want{n: 300, unit: "minute"}, sameAs: ref(4)},
		/* 6 */ {desc: []string{"files=top/a"}, want: none},
		/* 7 */ {desc: []string{"route=api/v1", "method=GET"}, want: want{n: 60, unit: "minute"}},
		/* 8 */ {desc: []string{"route=api/v2", "method=GET"}, want: want{n: 60, unit: "minute"}, sameAs: ref(7)},
		/* 9 */ {desc: []string{"route=api/v2", "method=POST"}, want: want{n: 60, unit: "minute"}, apart: ref(7)},
		/* 10 */ {desc: []string{"service=svc/a", "endpoint=e1"}, want: want{n: 80, unit: "minute"}},
		/* 11 */ {desc: []string{"service=svc/b", "endpoint=e1"}, want: want{n: 80, unit: "minute"}, sameAs: ref(10)},
		/* 12 */ {desc: []string{"path=path/a", "file=file/x", "type=t"}, want: want{n: 120, unit: "minute"}},
		/* 13 */ {desc: []string{"path=path/b", "file=file/x", "type=t"}, want: want{n: 120, unit: "minute"}, sameAs: ref(12)},
		/* 14 */ {desc: []string{"path=path/a", "file=file/y", "type=t"}, want: want{n: 120, unit: "minute"}, apart: ref(12)},
		/* 15 */ {desc: []string{"user=user/1", "resource=res/1", "action=read"}, want: want{n: 150, unit: "minute"}},
		/* 16 */ {desc: []string{"user=user/2", "resource=res/2", "action=read"}, want: want{n: 150, unit: "minute"}, sameAs: ref(15)},
		/* 17 */ {desc: []string{"file=test1"}, want: want{n: 50, unit: "minute"}},
		/* 18 */ {desc: []string{"file=test2"}, want: want{n: 100, unit: "minute"}},
		/* 19 */ {desc: []string{"file=test3"}, want: want{n: 100, unit: "minute"}, sameAs: ref(18)},
		/* 20 */ {desc: []string{"midpath=/api/v1"}, want: want{n: 100, unit: "minute"}},
		/* 21 */ {desc: []string{"midpath=/apiXv1"}, want: want{n: 100, unit: "minute"}, sameAs: ref(20)},
		/* 22 */ {desc: []string{"midpath=/api/v2"}, want: none},
		/* 23 */ {desc: []string{"multiroute=svc-a-ep-b-rpc"}, want: want{n: 50, unit: "minute"}},
		/* 24 */ {desc: []string{"multiroute=svcXepYrpc"}, want: want{n: 50, unit: "minute"}, sameAs: ref(23)},
		/* 25 */ {desc: []string{"multiroute=svcrpc"}, want: none},
		/* 26 */ {desc: []string{"midroute=/api/x/v2"}, want: want{n: 80, unit: "minute"}},
		/* 27 */ {desc: []string{"midroute=/apiv2"}, want: want{n: 80, unit: "minute"}, sameAs: ref(26)},
		/* 28 */ {desc: []string{"tenant=t1prod", "resource=resAv2"}, want: want{n: 60, unit: "minute"}},
		/* 29 */ {desc: []string{"tenant=t2prod", "resource=resBv2"}, want: want{n: 60, unit: "minute"}, sameAs: ref(28)},
		/* 30 */ {desc: []string{"tenant=t1dev", "resource=resAv2"}, want: none},
	})
}

func TestEnvoyMetadata(t *testing.T) {
	e := envoyEngine(t, "metadata.yaml")
	runLookups(t, e, []lookupCase{
		{desc: []string{"key1=value1", "subkey1=something"}, want: want{n: 5, unit: "second"}},
		{desc: []string{"key1=value1", "subkey1=subvalue1"}, want: want{n: 10, unit: "second"}},
		{desc: []string{"key2=anything"}, want: want{n: 20, unit: "minute"}},
	})
	md := e.Config().Descriptors[1].Metadata
	m, ok := md.(map[string]any)
	if !ok {
		t.Fatalf("metadata %#v, want a map", md)
	}
	if inner, _ := m["service_with_quota"].(map[string]any); inner["name"] != "service_2" {
		t.Errorf("metadata %#v, want service_with_quota.name service_2", m)
	}
}

func TestEnvoyUnitMultiplier(t *testing.T) {
	e := envoyEngine(t, "unit_multiplier.yaml")
	runLookups(t, e, []lookupCase{
		{desc: []string{"key1=a"}, want: want{n: 20, unit: "minute"}},
		{desc: []string{"key2=a"}, want: want{n: 25, unit: "minute"}},
	})
	if a, _ := e.Lookup("test-domain", rules.Entry{Key: "key1", Value: "a"}); a.RateLimit.UnitMultiplier != 5 {
		t.Errorf("unit_multiplier %d, want 5", a.RateLimit.UnitMultiplier)
	}
	e = envoyEngine(t, "units.yaml")
	runLookups(t, e, []lookupCase{
		{desc: []string{"weekly=a"}, want: want{n: 7, unit: "week"}},
		{desc: []string{"monthly=a"}, want: want{n: 30, unit: "month"}},
		{desc: []string{"yearly=a"}, want: want{n: 365, unit: "year"}},
	})
}

// TestEnvoyRejects ports the configs Envoy's service refuses: each is
// refused here too, by Parse or by Load, with the reason.
func TestEnvoyRejects(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"empty domain", "domain: \"\"\ndescriptors:\n  - key: a\n", "domain is required"},
		{"empty key", "domain: d\ndescriptors:\n  - key: \"\"\n    value: v\n", "key is required"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: key1\n    value: value1\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "duplicate descriptor"},
		{"bad limit unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: foo, requests_per_unit: 1}\n", `unit "foo" is not one of`},
		{"replaces self", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n", "cannot replace itself"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", "replaces"},
		{"bad yaml", "a: b\nc\n", "invalid YAML"},
		{"misspelled key", "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second, requests_per_unit: 1}\n", `unknown key "ratelimit"`},
		{"misspelled key 2", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requestsperunit: 1}\n", `unknown key "requestsperunit"`},
		{"non-string key", "domain: d\ndescriptors:\n  - key: a\n    0.25: x\n", "0.25"},
		{"non-map list", "domain: d\ndescriptors:\n  - a\n", "descriptor"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: day}\n", "unlimited excludes unit"},
		{"zero unit multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n", "unit_multiplier must be at least 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := rulesfile.Parse("f.yaml", []byte(c.yaml))
			if err == nil {
				e, nerr := rules.NewEngine(rules.WithKey("a", func(rules.Request) (string, error) { return "", nil }),
					rules.WithKey("key1", func(rules.Request) (string, error) { return "", nil }))
				if nerr != nil {
					t.Fatal(nerr)
				}
				err = e.Load(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
