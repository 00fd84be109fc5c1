package rulesfile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// Bounds on what a rejected file may produce: Parse and Load stop after
// 100 errors (and say so), and a message quotes values shortened, so that
// a hostile file cannot make its errors, which are logged, huge.
const (
	fuzzMaxErrors = 101
	fuzzMaxMsg    = 1024
)

// checkErrors fails unless err, from Parse or Load of fuzz.yaml, is a join
// of at most fuzzMaxErrors *rules.Error of that source, each with a
// message of at most fuzzMaxMsg bytes.
func checkErrors(t *testing.T, what string, err error) {
	t.Helper()
	errs := flatten(err)
	if len(errs) == 0 || len(errs) > fuzzMaxErrors {
		t.Fatalf("%s: %d errors", what, len(errs))
	}
	for _, e := range errs {
		var re *rules.Error
		if !errors.As(e, &re) || re.Source != "fuzz.yaml" || re.Line < 0 {
			t.Fatalf("%s: error %q (%T) is not a *rules.Error from fuzz.yaml", what, e, e)
		}
		if strings.TrimSpace(re.Msg) == "" || len(re.Msg) > fuzzMaxMsg {
			t.Fatalf("%s: error %q: message of %d bytes", what, e, len(re.Msg))
		}
		if !strings.HasPrefix(e.Error(), "fuzz.yaml") {
			t.Fatalf("%s: error %q does not start with its source", what, e)
		}
	}
}

// The Envoy schema as JSON, which is YAML: the form FuzzParseLoad writes a
// parsed Config back in, to parse it again.
type (
	jsonConfig struct {
		Domain      string           `json:"domain"`
		Descriptors []jsonDescriptor `json:"descriptors,omitempty"`
		Cascade     bool             `json:"cascade,omitempty"`
	}
	jsonDescriptor struct {
		Key            string           `json:"key"`
		Value          string           `json:"value,omitempty"`
		RateLimit      *jsonRateLimit   `json:"rate_limit,omitempty"`
		Descriptors    []jsonDescriptor `json:"descriptors,omitempty"`
		ShadowMode     bool             `json:"shadow_mode,omitempty"`
		DetailedMetric bool             `json:"detailed_metric,omitempty"`
		ValueToMetric  bool             `json:"value_to_metric,omitempty"`
		ShareThreshold bool             `json:"share_threshold,omitempty"`
		QuotaMode      bool             `json:"quota_mode,omitempty"`
		Match          *jsonMatch       `json:"match,omitempty"`
	}
	jsonRateLimit struct {
		Unit            string     `json:"unit,omitempty"`
		RequestsPerUnit int        `json:"requests_per_unit,omitempty"`
		UnitMultiplier  int        `json:"unit_multiplier,omitempty"`
		Unlimited       bool       `json:"unlimited,omitempty"`
		Name            string     `json:"name,omitempty"`
		Replaces        []jsonName `json:"replaces,omitempty"`
		Algorithm       string     `json:"algorithm,omitempty"`
		Burst           int        `json:"burst,omitempty"`
		SoftPercent     int        `json:"soft_percent,omitempty"`
	}
	jsonName struct {
		Name string `json:"name"`
	}
	jsonMatch struct {
		Method []string `json:"method,omitempty"`
		Path   string   `json:"path,omitempty"`
	}
)

func toJSONDescriptors(ds []rules.Descriptor) []jsonDescriptor {
	var out []jsonDescriptor
	for _, d := range ds {
		j := jsonDescriptor{Key: d.Key, Value: d.Value, Descriptors: toJSONDescriptors(d.Descriptors),
			ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, ValueToMetric: d.ValueToMetric,
			ShareThreshold: d.ShareThreshold, QuotaMode: d.QuotaMode}
		if rl := d.RateLimit; rl != nil {
			j.RateLimit = &jsonRateLimit{Unit: rl.Unit, RequestsPerUnit: rl.RequestsPerUnit, UnitMultiplier: rl.UnitMultiplier,
				Unlimited: rl.Unlimited, Name: rl.Name, Algorithm: rl.Algorithm, Burst: rl.Burst, SoftPercent: rl.SoftPercent}
			for _, n := range rl.Replaces {
				j.RateLimit.Replaces = append(j.RateLimit.Replaces, jsonName{n})
			}
		}
		if m := d.Match; m != nil {
			j.Match = &jsonMatch{Method: m.Methods, Path: m.Path}
		}
		out = append(out, j)
	}
	return out
}

// yamlEscaped returns the JSON text out with the characters that JSON
// writes raw and YAML reads otherwise written as \u escapes, which both
// read alike: DEL, the C1 controls, U+FFFE and U+FFFF, which YAML refuses
// raw, and NEL (U+0085), a line break to YAML, folded into a space. The
// rest of JSON is YAML as it is.
func yamlEscaped(out []byte) []byte {
	var b strings.Builder
	for _, r := range string(out) {
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfffe || r == 0xffff {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return []byte(b.String())
}

// withoutPositions returns a copy of ds without the Line fields and the
// Metadata, which a round trip through JSON does not keep.
func withoutPositions(ds []rules.Descriptor) []rules.Descriptor {
	if ds == nil {
		return nil
	}
	out := make([]rules.Descriptor, len(ds))
	for i, d := range ds {
		d.Line, d.Metadata = 0, nil
		if d.RateLimit != nil {
			rl := *d.RateLimit
			rl.Line = 0
			d.RateLimit = &rl
		}
		if d.Match != nil {
			m := *d.Match
			m.Line = 0
			d.Match = &m
		}
		d.Descriptors = withoutPositions(d.Descriptors)
		out[i] = d
	}
	return out
}

// sameConfig reports whether a and b are equal, their metadata compared
// as text, since it may hold NaN (.nan), which is not equal to itself.
func sameConfig(a, b rules.Config) bool {
	a.Descriptors, b.Descriptors = metadataText(a.Descriptors), metadataText(b.Descriptors)
	return reflect.DeepEqual(a, b)
}

func metadataText(ds []rules.Descriptor) []rules.Descriptor {
	if ds == nil {
		return nil
	}
	out := make([]rules.Descriptor, len(ds))
	for i, d := range ds {
		if d.Metadata != nil {
			d.Metadata = fmt.Sprintf("%#v", d.Metadata)
		}
		d.Descriptors = metadataText(d.Descriptors)
		out[i] = d
	}
	return out
}

// fuzzRequests are decided by the rules of every file FuzzParseLoad loads.
func fuzzRequests() []*http.Request {
	var rs []*http.Request
	for _, target := range []string{"/", "/login", "/api/v1/items?token=t", "/a/../b//c/"} {
		u, _ := url.Parse(target)
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			r := &http.Request{Method: m, URL: u, RemoteAddr: "192.0.2.1:1234",
				Header: http.Header{"X-Api-Key": {"k"}, "X-Forwarded-For": {"198.51.100.7"}}}
			rs = append(rs, r.WithContext(context.WithValue(context.Background(), fuzzUser{}, "alice")))
		}
	}
	return rs
}

type fuzzUser struct{}

// FuzzParseLoad parses arbitrary files and loads what parses into an
// engine, as rulesfile.Load does:
//
//   - neither panics; Parse either fails, returning the zero Config, or
//     returns a Config of the file's source, the same for the same file;
//   - every error is a *rules.Error of the file, with a clear message: not
//     empty, at most fuzzMaxMsg bytes, at most fuzzMaxErrors of them;
//   - a Config written back as YAML (JSON, in the same schema) parses to
//     the same Config, but for the lines and the metadata;
//   - Load either fails, leaving the rules in force, or puts exactly the
//     Config in force, which then decides requests without an error, and
//     loads again.
func FuzzParseLoad(f *testing.F) {
	for _, ex := range examples {
		f.Add([]byte(ex.yaml))
	}
	for _, r := range rejections {
		f.Add([]byte(r.yaml))
	}
	long := strings.Repeat("k", 5000)
	for _, s := range []string{
		"domain: x\ndescriptors:\n  - key: " + long + "\n",
		"domain: x\ndescriptors:\n  - key: header:X\n    value: " + long + "\n    rate_limit: {unit: " + long + ", requests_per_unit: 1}\n",
		"domain: x\ndescriptors:\n  - key: &k " + strings.Repeat("u", 2000) + "\n" + strings.Repeat("  - key: *k\n", 300),
		"domain: &d x\ndescriptors: [{key: remote_address, rate_limit: &r {unit: second, requests_per_unit: 1, name: a}}, {key: generic_key, rate_limit: *r}]\n",
		"domain: x\ncascade: true\ndescriptors:\n  - key: header:X-A\n    descriptors:\n      - key: header:X-B\n        descriptors:\n          - key: header:X-C\n            rate_limit: {unit: Minute, requests_per_unit: 9223372036854775807, unit_multiplier: 1000}\n",
		"domain: x\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token-bucket, burst: 10, soft_percent: 20, name: n, replaces: [{name: n}]}\n",
		"domain: x\ndescriptors:\n  - {key: generic_key, match: {method: [get, HEAD, \"\"], path: /a/*/b/*}, rate_limit: {unlimited: true, replaces: [{name: zz}]}}\n",
		"domain: \"\\u2028\\t\\x80\\x7f\\x9f\\x85\\uffff\"\ndescriptors: [{key: \"\\x7f\", value: \"\\u0085\\ufffe\"}]\n",
		"domain: \"\\u2028\\t\\x00\"\ndescriptors:\n  - {key: \"header:\\u00e9\", value: '''*''', metadata: {a: [1, .nan, !!binary AA==]}}\n",
		"domain: x\ndescriptors: [" + strings.Repeat("{key: a, descriptors: [", 200) + strings.Repeat("]}", 200) + "]\n",
		"%YAML 1.2\n---\ndomain: x\n...\n---\n",
		"domain: !!binary eA==\ndescriptors: !!seq []\ncascade: !!bool false\n",
		"domain: x\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 0x7fffffffffffffff}\n  - key: user\n",
	} {
		f.Add([]byte(s))
	}
	e, err := rules.NewEngine(rules.WithUserKey(fuzzUser{}))
	if err != nil {
		f.Fatal(err)
	}
	requests := fuzzRequests()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := rulesfile.Parse("fuzz.yaml", data)
		if err != nil {
			checkErrors(t, "Parse", err)
			if !reflect.DeepEqual(cfg, rules.Config{}) {
				t.Fatalf("Parse returned %s with its error", dump(cfg))
			}
			return
		}
		if cfg.Source != "fuzz.yaml" {
			t.Fatalf("Source = %q", cfg.Source)
		}
		if again, err := rulesfile.Parse("fuzz.yaml", data); err != nil || !sameConfig(cfg, again) {
			t.Fatalf("Parse is not deterministic: %s, then %s, %v", dump(cfg), dump(again), err)
		}

		out, err := json.Marshal(jsonConfig{Domain: cfg.Domain, Descriptors: toJSONDescriptors(cfg.Descriptors), Cascade: cfg.Cascade})
		if err != nil {
			t.Fatal(err)
		}
		out = yamlEscaped(out)
		back, err := rulesfile.Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("%s, written back as\n%s\ndoes not parse: %v", dump(cfg), out, err)
		}
		want := rules.Config{Source: cfg.Source, Domain: cfg.Domain, Cascade: cfg.Cascade, Descriptors: withoutPositions(cfg.Descriptors)}
		back.Line, back.Descriptors = 0, withoutPositions(back.Descriptors)
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("%s, written back as\n%s\nparses to %s", dump(want), out, dump(back))
		}

		before := e.Config()
		if err := e.Load(cfg); err != nil {
			checkErrors(t, "Load", err)
			if !sameConfig(e.Config(), before) {
				t.Fatalf("a failed Load changed the rules in force to %s", dump(e.Config()))
			}
			return
		}
		if !sameConfig(e.Config(), cfg) {
			t.Fatalf("Load put %s in force, want %s", dump(e.Config()), dump(cfg))
		}
		for _, r := range requests {
			if _, _, err := e.Matches(rules.HTTPRequest(r)); err != nil {
				t.Fatalf("%s %s: %v", r.Method, r.URL, err)
			}
		}
		if err := e.Load(cfg); err != nil {
			t.Fatalf("the config loaded once, not twice: %v", err)
		}
	})
}
