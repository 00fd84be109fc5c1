package main

import (
	"github.com/ratekit/ratekit/internal/cli"

	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rulesV1 limits every client to 3 requests per minute and logins to 2.
const rulesV1 = `domain: demo-test
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: remote_address
    match:
      method: POST
      path: /login
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// TestRulesFile runs the demo with -config on every framework: the file's
// rules decide GET / and also apply to POST /login; an edit applies while
// it runs, keeping the counts; an invalid edit is logged and ignored.
func TestRulesFile(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			require.NoError(t, os.WriteFile(path, []byte(rulesV1), 0o644))
			d := start(t, "-framework", fw, "-config", path, "-trusted-proxies", "127.0.0.1/32")
			client := func(ip string) []string { return []string{"X-Forwarded-For", ip} }

			for i := 1; i <= 3; i++ {
				r := d.get("/", client("192.0.2.1")...)
				require.Equal(t, 200, r.status, "request %d", i)
				assert.Equal(t, "3", r.header.Get("X-RateLimit-Limit"))
				assert.Equal(t, strconv.Itoa(3-i), r.header.Get("X-RateLimit-Remaining"))
			}
			r := d.get("/", client("192.0.2.1")...)
			p := requireProblem(t, r, 429)
			assert.Equal(t, "demo-test/remote_address", p.Limit)
			assert.Equal(t, "60", r.header.Get("Retry-After"))

			for i := 1; i <= 2; i++ {
				r := d.do("POST", "/login", client("192.0.2.2")...)
				require.Equal(t, 200, r.status, "login %d", i)
				assert.Equal(t, "2", r.header.Get("X-RateLimit-Limit"), "the file's login rule is the most restrictive")
			}
			requireProblem(t, d.do("POST", "/login", client("192.0.2.2")...), 429)
			assert.Empty(t, d.get("/healthz", client("192.0.2.1")...).header.Get("X-RateLimit-Limit"), "never limited")

			// Raise the limit to 5: the 3 requests counted stay counted.
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(rulesV1, "requests_per_unit: 3", "requests_per_unit: 5", 1)), 0o644))
			waitFor(t, func(n int) bool { // each probe is another client
				return d.get("/", client("198.51.100."+strconv.Itoa(n))...).header.Get("X-RateLimit-Limit") == "5"
			})
			r = d.get("/", client("192.0.2.1")...)
			require.Equal(t, 200, r.status)
			assert.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"), "3 of 5 used before the reload; this is the 4th")

			// An invalid edit is logged with its line and changes nothing.
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(rulesV1, "unit: minute", "unit: fortnight", 1)), 0o644))
			waitFor(t, func(int) bool { return strings.Contains(d.stderr.String(), "rules reload rejected") })
			assert.Contains(t, d.stderr.String(), "rules.yaml:4: descriptors[0].rate_limit: unit")
			r = d.get("/", client("192.0.2.1")...)
			require.Equal(t, 200, r.status)
			assert.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
			requireProblem(t, d.get("/", client("192.0.2.1")...), 429)

			// A new minute: the counts start over.
			d.clock.Advance(time.Minute)
			assert.Equal(t, 200, d.get("/", client("192.0.2.1")...).status)
		})
	}
}

// waitFor polls cond until it holds, for at most 10 s: the file watcher
// reloads in real time, not on the demo's fake clock.
func waitFor(t *testing.T, cond func(attempt int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := 1; !cond(n); n++ {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(20 * time.Millisecond) // polling a real-time file watcher, not timing a limit
	}
}

func TestRulesFileErrors(t *testing.T) {
	_, err := parseFlags([]string{"-config", "x.yaml", "-limit", "5"}, &strings.Builder{})
	assert.ErrorContains(t, err, "-limit applies only without -config")
	assert.Equal(t, 2, cli.ExitCode("demo", err, &strings.Builder{}))

	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte("domain: d\ndescriptors:\n  - key: remote_address\n    rate_limt: {}\n"), 0o644))
	var stderr strings.Builder
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-config", path}, &strings.Builder{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules.yaml:4:")
	assert.Contains(t, err.Error(), `"rate_limt"`)
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))
}
