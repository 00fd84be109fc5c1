package rulesfile_test

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// The shapes of the example configurations of the envoyproxy/ratelimit
// README, and one with ratekit's extensions.
var examples = []struct {
	name string
	yaml string
	want rules.Config
}{
	{
		name: "database values",
		yaml: `# Per-database limits.
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "mongo_cps", Line: 2,
			Descriptors: []rules.Descriptor{
				{Key: "database", Value: "users", Line: 4,
					RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 500, Line: 6}},
				{Key: "database", Value: "default", Line: 10,
					RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 500, Line: 12}},
			},
		},
	},
	{
		name: "nested messaging",
		yaml: `domain: messaging
descriptors:
  # Only 5 marketing messages a day to one number.
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # 100 messages a day to any one number.
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "messaging", Line: 1,
			Descriptors: []rules.Descriptor{
				{Key: "message_type", Value: "marketing", Line: 4,
					Descriptors: []rules.Descriptor{
						{Key: "to_number", Line: 7,
							RateLimit: &rules.RateLimit{Unit: "day", RequestsPerUnit: 5, Line: 8}},
					}},
				{Key: "to_number", Line: 13,
					RateLimit: &rules.RateLimit{Unit: "day", RequestsPerUnit: 100, Line: 14}},
			},
		},
	},
	{
		name: "per-IP with a block list entry",
		yaml: `---
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # This address is blocked.
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "edge_proxy_per_ip", Line: 2,
			Descriptors: []rules.Descriptor{
				{Key: "remote_address", Line: 4,
					RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 10, Line: 5}},
				{Key: "remote_address", Value: "50.0.0.5", Line: 10,
					RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 0, Line: 12}},
			},
		},
	},
	{
		name: "shadow mode",
		yaml: `domain: example
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        value: subvalue
        rate_limit:
          requests_per_unit: 300
          unit: second
        shadow_mode: true
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "example", Line: 1,
			Descriptors: []rules.Descriptor{
				{Key: "key", Value: "value", Line: 3,
					Descriptors: []rules.Descriptor{
						{Key: "subkey", Value: "subvalue", Line: 6, ShadowMode: true,
							RateLimit: &rules.RateLimit{Unit: "second", RequestsPerUnit: 300, Line: 8}},
					}},
			},
		},
	},
	{
		name: "name and replaces",
		yaml: `domain: example
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          name: "key-value-subkey"
          unit: minute
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
      replaces:
        - name: key-value-subkey
        - name: other
  - key: key3
    rate_limit: {name: other, unit: hour, requests_per_unit: 1000}
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "example", Line: 1,
			Descriptors: []rules.Descriptor{
				{Key: "key", Value: "value", Line: 3,
					Descriptors: []rules.Descriptor{
						{Key: "subkey", Line: 6,
							RateLimit: &rules.RateLimit{Name: "key-value-subkey", Unit: "minute", RequestsPerUnit: 10, Line: 7}},
					}},
				{Key: "key2", Line: 11,
					RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 20,
						Replaces: []string{"key-value-subkey", "other"}, Line: 12}},
				{Key: "key3", Line: 18,
					RateLimit: &rules.RateLimit{Name: "other", Unit: "hour", RequestsPerUnit: 1000, Line: 19}},
			},
		},
	},
	{
		name: "ratekit extensions",
		yaml: `domain: api
descriptors:
  - value: ignored-order   # key need not come first
    key: header:X-API-Key
    detailed_metric: true
    match: {method: POST, path: /login}
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token-bucket, burst: 10, soft_percent: 20}
  - key: remote_address
    match:
      method: [GET, HEAD]
      path: /api/*
    rate_limit:
      unlimited: true
  - key: path
    rate_limit:
    descriptors: []
`,
		want: rules.Config{
			Source: "f.yaml", Domain: "api", Line: 1,
			Descriptors: []rules.Descriptor{
				{Key: "header:X-API-Key", Value: "ignored-order", Line: 4, DetailedMetric: true,
					Match: &rules.Match{Methods: []string{"POST"}, Path: "/login", Line: 6},
					RateLimit: &rules.RateLimit{Unit: "minute", RequestsPerUnit: 5,
						Algorithm: "token-bucket", Burst: 10, SoftPercent: 20, Line: 7}},
				{Key: "remote_address", Line: 8,
					Match:     &rules.Match{Methods: []string{"GET", "HEAD"}, Path: "/api/*", Line: 9},
					RateLimit: &rules.RateLimit{Unlimited: true, Line: 12}},
				{Key: "path", Line: 14},
			},
		},
	},
}

func TestParseExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			got, err := rulesfile.Parse("f.yaml", []byte(ex.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, ex.want) {
				t.Errorf("Parse:\n got %s\nwant %s", dump(got), dump(ex.want))
			}
		})
	}
}

// dump formats a Config with its pointers followed.
func dump(c rules.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Source:%q Domain:%q Line:%d", c.Source, c.Domain, c.Line)
	dumpDescriptors(&b, c.Descriptors)
	b.WriteString("}")
	return b.String()
}

func dumpDescriptors(b *strings.Builder, ds []rules.Descriptor) {
	if ds == nil {
		return
	}
	b.WriteString(" Descriptors:[")
	for _, d := range ds {
		fmt.Fprintf(b, "{Key:%q Value:%q Line:%d Shadow:%v Detailed:%v", d.Key, d.Value, d.Line, d.ShadowMode, d.DetailedMetric)
		if d.RateLimit != nil {
			fmt.Fprintf(b, " RateLimit:%+v", *d.RateLimit)
		}
		if d.Match != nil {
			fmt.Fprintf(b, " Match:%+v", *d.Match)
		}
		dumpDescriptors(b, d.Descriptors)
		b.WriteString("}")
	}
	b.WriteString("]")
}

func TestParseScalarText(t *testing.T) {
	got, err := rulesfile.Parse("f.yaml", []byte(`domain: 42
descriptors:
  - key: 7
    value: 500
    rate_limit: {name: 1.50, unit: second, requests_per_unit: 0x10, replaces: [{name: true}]}
  - key: k
    value: "007"
  - key: k
    value: 0500
  - key: k
    value:
    shadow_mode:
    match: {method: [~], path: ~}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Descriptors
	if got.Domain != "42" || d[0].Key != "7" || d[0].Value != "500" ||
		d[0].RateLimit.Name != "1.50" || d[0].RateLimit.RequestsPerUnit != 16 ||
		!reflect.DeepEqual(d[0].RateLimit.Replaces, []string{"true"}) ||
		d[1].Value != "007" || d[2].Value != "0500" || d[3].Value != "" || d[3].ShadowMode ||
		!reflect.DeepEqual(d[3].Match, &rules.Match{Methods: []string{""}, Line: 13}) {
		t.Errorf("Parse: got %s", dump(got))
	}
}

func TestParseAliases(t *testing.T) {
	got, err := rulesfile.Parse("f.yaml", []byte(`domain: aliases
descriptors:
  - key: a
    rate_limit: &std
      unit: second
      requests_per_unit: 10
  - key: b
    rate_limit: *std
`))
	if err != nil {
		t.Fatal(err)
	}
	// Each RateLimit has the line of its own rate_limit field.
	want0 := &rules.RateLimit{Unit: "second", RequestsPerUnit: 10, Line: 4}
	want1 := &rules.RateLimit{Unit: "second", RequestsPerUnit: 10, Line: 8}
	if !reflect.DeepEqual(got.Descriptors[0].RateLimit, want0) || !reflect.DeepEqual(got.Descriptors[1].RateLimit, want1) {
		t.Errorf("Parse: got %s", dump(got))
	}
	if got.Descriptors[0].RateLimit == got.Descriptors[1].RateLimit {
		t.Error("Parse shares one *RateLimit between two descriptors")
	}
}

// TestParseAliasBomb checks that a "billion laughs" of descriptors, a
// few hundred bytes that expand to 10^9 descriptors, is rejected without
// expanding it.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &d0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - &d%d {key: k%d, descriptors: [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*d%d", i-1)
		}
		b.WriteString("]}\n")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := rulesfile.Parse("bomb.yaml", []byte(b.String()))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "document too large once its aliases are expanded") {
		t.Fatalf("Parse: got error %v, want one about aliases", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("Parse allocated %d MiB", alloc>>20)
	}
}

// The rejections Parse makes, each with its exact message.
var rejections = []struct {
	name, yaml, want string
}{
	{"syntax", "domain: x\ndescriptors: [\n", "f.yaml:2: invalid YAML: did not find expected node content"},
	{"tab indentation", "domain: x\n\tdescriptors: []\n", "f.yaml:2: invalid YAML: found a tab character that violates indentation"},
	{"key indented one space too few", "domain: d\ndescriptors:\n  - key: a\n   value: b\n", "f.yaml:4: invalid YAML: did not find expected '-' indicator"},
	{"key indented one space too many", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n     requests_per_unit: 1\n", "f.yaml:6: invalid YAML: did not find expected key"},
	{"empty", "", "f.yaml: empty document"},
	{"only comments", "# nothing\n", "f.yaml: empty document"},
	{"null document", "---\n~\n", "f.yaml:1: empty document"},
	{"two documents", "domain: a\n---\ndomain: b\n", "f.yaml:2: more than one YAML document (a rules file holds one)"},
	{"top-level sequence", "- domain: a\n", "f.yaml:1: want a mapping, got a sequence"},
	{"top-level scalar", "domain\n", `f.yaml:1: want a mapping, got the string "domain"`},
	{"unknown top-level key", "domian: x\n",
		`f.yaml:1: unknown key "domian" (did you mean "domain"?); known keys: domain, descriptors, cascade`},
	{"misspelt rate_limit", "domain: x\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n",
		`f.yaml:4: descriptors[0]: unknown key "rate_limt" (did you mean "rate_limit"?); known keys: key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, metadata, match`},
	{"unknown rate_limit key", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      period: 5\n",
		`f.yaml:6: descriptors[0].rate_limit: unknown key "period"; known keys: unit, requests_per_unit, unit_multiplier, unlimited, name, replaces, algorithm, burst, soft_percent`},
	{"unknown match key", "domain: x\ndescriptors:\n  - key: a\n    match: {methods: GET}\n",
		`f.yaml:4: descriptors[0].match: unknown key "methods" (did you mean "method"?); known keys: method, path`},
	{"unknown replaces key", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      replaces:\n        - nme: a\n",
		`f.yaml:6: descriptors[0].rate_limit.replaces[0]: unknown key "nme" (did you mean "name"?); known keys: name`},
	{"duplicate top-level key", "domain: a\ndescriptors: []\ndomain: b\n", `f.yaml:3: key "domain" repeated (first at line 1)`},
	{"duplicate nested key", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit: minute\n",
		`f.yaml:6: descriptors[0].rate_limit: key "unit" repeated (first at line 5)`},
	{"descriptors is a mapping", "domain: x\ndescriptors:\n  key: a\n",
		"f.yaml:3: descriptors: want a sequence of descriptors, got a mapping"},
	{"descriptor is a string", "domain: x\ndescriptors:\n  - a\n",
		`f.yaml:3: descriptors[0]: want a mapping, got the string "a"`},
	{"nested descriptors is a scalar", "domain: x\ndescriptors:\n  - key: a\n    descriptors: 5\n",
		`f.yaml:4: descriptors[0].descriptors: want a sequence of descriptors, got "5"`},
	{"rate_limit is a sequence", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: [second, 5]\n",
		"f.yaml:4: descriptors[0].rate_limit: want a mapping, got a sequence"},
	{"domain is a mapping", "domain: {name: x}\n", "f.yaml:1: domain: want a string, got a mapping"},
	{"key is a sequence", "domain: x\ndescriptors:\n  - key: [a]\n", "f.yaml:3: descriptors[0].key: want a string, got a sequence"},
	{"requests_per_unit is a word", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: ten\n",
		`f.yaml:5: descriptors[0].rate_limit.requests_per_unit: want a non-negative integer, got the string "ten"`},
	{"requests_per_unit is a float", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1.5}\n",
		`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a non-negative integer, got "1.5"`},
	{"requests_per_unit is quoted", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: \"10\"}\n",
		`f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a non-negative integer, got the string "10"`},
	{"requests_per_unit is negative", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: -1}\n",
		"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: want a non-negative integer, got -1"},
	{"burst is negative", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {burst: -10}\n",
		"f.yaml:4: descriptors[0].rate_limit.burst: want a non-negative integer, got -10"},
	{"soft_percent overflows", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {soft_percent: 9223372036854775808}\n",
		`f.yaml:4: descriptors[0].rate_limit.soft_percent: integer "9223372036854775808" out of range`},
	{"shadow_mode is yes", "domain: x\ndescriptors:\n  - key: a\n    shadow_mode: yes\n",
		`f.yaml:4: descriptors[0].shadow_mode: want true or false, got the string "yes"`},
	{"unlimited is 1", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: 1}\n",
		`f.yaml:4: descriptors[0].rate_limit.unlimited: want true or false, got "1"`},
	{"detailed_metric is a list", "domain: x\ndescriptors:\n  - key: a\n    detailed_metric: []\n",
		"f.yaml:4: descriptors[0].detailed_metric: want true or false, got a sequence"},
	{"replaces is a string", "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {replaces: other}\n",
		`f.yaml:4: descriptors[0].rate_limit.replaces: want a sequence of {name: ...} mappings, got the string "other"`},
	{"replaces entry is a string", "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      replaces:\n        - other\n",
		`f.yaml:6: descriptors[0].rate_limit.replaces[0]: want a mapping such as {name: limit_name}, got the string "other"`},
	{"method is a mapping", "domain: x\ndescriptors:\n  - key: a\n    match: {method: {GET: true}}\n",
		"f.yaml:4: descriptors[0].match.method: want a method or a sequence of methods, got a mapping"},
	{"method list holds a list", "domain: x\ndescriptors:\n  - key: a\n    match:\n      method: [GET, [POST]]\n",
		"f.yaml:5: descriptors[0].match.method[1]: want a string, got a sequence"},
	{"match is a string", "domain: x\ndescriptors:\n  - key: a\n    match: /login\n",
		`f.yaml:4: descriptors[0].match: want a mapping, got the string "/login"`},
	{"sequence key", "domain: x\n? [a]\n: b\n", "f.yaml:2: want a string key, got a sequence"},
	{"merge key", "base: &b {domain: x}\n<<: *b\n", "f.yaml:1: unknown key \"base\"; known keys: domain, descriptors, cascade\n" +
		"f.yaml:2: merge keys (<<) are not supported"},
	{"alias inside its anchor", "domain: x\ndescriptors: &all\n  - key: a\n    descriptors: *all\n",
		"f.yaml:4: descriptors[0].descriptors: alias *all is inside its own anchor"},
	{"unknown anchor", "domain: *nowhere\n", "f.yaml: invalid YAML: unknown anchor 'nowhere' referenced"},
	{"unknown anchor with a long name", "domain: *" + strings.Repeat("n", 3000) + "\n",
		"f.yaml: invalid YAML: unknown anchor '" + strings.Repeat("n", 40) + "...' referenced"},
	{"several errors", "domain: x\ndescriptors:\n  - key: a\n    shadow_mode: 1\n  - key: b\n    rate_limit: {unit: [x], burst: -1}\n",
		`f.yaml:4: descriptors[0].shadow_mode: want true or false, got "1"` + "\n" +
			"f.yaml:6: descriptors[1].rate_limit.unit: want a string, got a sequence\n" +
			"f.yaml:6: descriptors[1].rate_limit.burst: want a non-negative integer, got -1"},
}

func TestParseRejects(t *testing.T) {
	for _, r := range rejections {
		t.Run(r.name, func(t *testing.T) {
			cfg, err := rulesfile.Parse("f.yaml", []byte(r.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %s", dump(cfg))
			}
			if got := err.Error(); got != r.want {
				t.Errorf("Parse error:\n got %s\nwant %s", got, r.want)
			}
			if !reflect.DeepEqual(cfg, rules.Config{}) {
				t.Errorf("Parse returned %s with its error, want the zero Config", dump(cfg))
			}
			for _, e := range flatten(err) {
				var re *rules.Error
				if !errors.As(e, &re) || re.Source != "f.yaml" {
					t.Errorf("error %q (%T) is not a *rules.Error from f.yaml", e, e)
				}
			}
		})
	}
}

// flatten returns the errors joined in err.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestParseErrorFields(t *testing.T) {
	_, err := rulesfile.Parse("dir/rules.yaml", []byte("domain: x\ndescriptors:\n  - key: a\n  - key: b\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n"))
	var re *rules.Error
	if !errors.As(err, &re) {
		t.Fatalf("Parse: got %v, want a *rules.Error", err)
	}
	want := rules.Error{Source: "dir/rules.yaml", Line: 7, Path: "descriptors[1].rate_limit.requests_per_unit",
		Msg: `want a non-negative integer, got the string "lots"`}
	if *re != want {
		t.Errorf("Parse: got %+v, want %+v", *re, want)
	}
}

func TestParseErrorLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: x\ndescriptors:\n")
	for range 500 {
		b.WriteString("  - {key: a, shadow_mode: maybe}\n")
	}
	_, err := rulesfile.Parse("f.yaml", []byte(b.String()))
	errs := flatten(err)
	if len(errs) != 101 || !strings.HasSuffix(errs[100].Error(), ": too many errors") {
		t.Errorf("Parse: got %d errors, the last %v; want 100 and \"too many errors\"", len(errs), errs[len(errs)-1])
	}
}

func TestParseDeepNesting(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: x\ndescriptors: ")
	for range 1200 {
		b.WriteString("[{key: a, descriptors: ")
	}
	b.WriteString("[]")
	for range 1200 {
		b.WriteString("}]")
	}
	_, err := rulesfile.Parse("f.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "descriptors nested more than 32 deep") {
		t.Errorf("Parse: got %v, want a nesting error", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, ex := range examples {
		f.Add([]byte(ex.yaml))
	}
	for _, r := range rejections {
		f.Add([]byte(r.yaml))
	}
	f.Add([]byte("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"))
	f.Add([]byte("domain: x\ndescriptors: &d\n  - key: a\n    rate_limit: &r {unit: second}\n  - key: b\n    rate_limit: *r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := rulesfile.Parse("fuzz.yaml", data)
		if err != nil {
			for _, e := range flatten(err) {
				var re *rules.Error
				if !errors.As(e, &re) || re.Source != "fuzz.yaml" || re.Msg == "" {
					t.Fatalf("error %q (%T) is not a *rules.Error from fuzz.yaml", e, e)
				}
			}
			return
		}
		if cfg.Source != "fuzz.yaml" {
			t.Fatalf("Source = %q", cfg.Source)
		}
		again, err := rulesfile.Parse("fuzz.yaml", data)
		if err != nil || !reflect.DeepEqual(cfg, again) {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
	})
}
