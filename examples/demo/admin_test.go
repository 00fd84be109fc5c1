package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
)

// adminURL returns the base URL of the admin listener that the running
// demo printed to stderr: it prints it before the address of its API, so
// it is there once start returns.
func (d *demo) adminURL() string {
	d.t.Helper()
	m := regexp.MustCompile(`demo: admin listening on (http://(\S+)/admin/ratekit/) `).FindStringSubmatch(d.stderr.String())
	require.NotNil(d.t, m, "stderr: %s", d.stderr.String())
	host, port, err := net.SplitHostPort(m[2])
	require.NoError(d.t, err)
	require.Equal(d.t, "127.0.0.1", host)
	require.NotEqual(d.t, "0", port, "the real port is printed")
	require.NotEqual(d.t, d.base, "http://"+m[2], "a listener of its own")
	return m[1]
}

// admin sends a request to the admin listener: a GET without body, or a
// POST of body as JSON. token "" sends no Authorization header.
func (d *demo) admin(method, route, token string, body any) (int, map[string]any) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(d.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.adminURL()+route, rd)
	require.NoError(d.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := d.client.Do(req)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	var got map[string]any
	require.NoError(d.t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(d.t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(d.t, "no-store", resp.Header.Get("Cache-Control"))
	if resp.StatusCode == http.StatusUnauthorized {
		assert.Equal(d.t, `Bearer realm="ratekit admin"`, resp.Header.Get("WWW-Authenticate"))
	}
	return resp.StatusCode, got
}

// TestAdmin exhausts a client's limit, then operates on it through the
// admin listener: state, reset and grant, each only with the bearer token.
func TestAdmin(t *testing.T) {
	for _, fw := range []string{"stdhttp", "fiber"} { // net/http, and fasthttp beside net/http
		t.Run(fw, func(t *testing.T) {
			d := start(t, "-framework", fw, "-admin", "127.0.0.1:0", "-admin-token", "t0ken",
				"-trusted-proxies", "127.0.0.1", "-algorithm", "fixed-window", "-limit", "2")
			const ip = "192.0.2.1"
			api := func() int { return d.get("/", "X-Forwarded-For", ip).status }
			require.Equal(t, 200, api())
			require.Equal(t, 200, api())
			require.Equal(t, 429, api())

			status, got := d.admin("GET", "limiters", "t0ken", nil)
			require.Equal(t, 200, status, "%v", got)
			assert.Equal(t, []any{"demo", "login"}, got["limiters"])

			status, got = d.admin("GET", "state?limiter=demo&key="+ip, "t0ken", nil)
			require.Equal(t, 200, status, "%v", got)
			assert.Equal(t, core.KeyHash(ip), got["key_hash"])
			assert.Equal(t, true, got["tracked"])
			assert.Equal(t, false, got["decision"].(map[string]any)["allowed"])
			assert.NotContains(t, d.stderr.String(), "t0ken", "a given token is never printed")

			// Without the token, or with a wrong one, nothing is done.
			reset := map[string]any{"limiter": "demo", "key": ip, "reason": "test reset"}
			for _, token := range []string{"", "t0ke", "t0ken0", "T0KEN"} {
				status, got = d.admin("POST", "reset", token, reset)
				require.Equal(t, 401, status, "token %q", token)
				assert.Equal(t, "a valid bearer token is required", got["error"])
				status, _ = d.admin("GET", "state?limiter=demo&key="+ip, token, nil)
				require.Equal(t, 401, status, "token %q", token)
			}
			req, err := http.NewRequest("GET", d.adminURL()+"limiters", nil)
			require.NoError(t, err)
			req.SetBasicAuth("admin", "t0ken")
			resp, err := d.client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 401, resp.StatusCode, "only a bearer token")
			require.Equal(t, 429, api(), "not reset")

			status, got = d.admin("POST", "reset", "t0ken", reset)
			require.Equal(t, 200, status, "%v", got)
			assert.Equal(t, true, got["found"])
			assert.Contains(t, d.stderr.String(), `msg="ratekit: key reset" limit=demo key_hash=`+core.KeyHash(ip)+` reason="test reset" found=true`)
			require.Equal(t, 200, api(), "reset")
			require.Equal(t, 200, api())
			require.Equal(t, 429, api())

			status, got = d.admin("POST", "grant", "Bearer", map[string]any{"limiter": "demo", "key": ip, "amount": 1})
			require.Equal(t, 401, status, "%v", got)
			status, got = d.admin("POST", "grant", "t0ken", map[string]any{"limiter": "demo", "key": ip, "amount": 1, "reason": "test grant"})
			require.Equal(t, 200, status, "%v", got)
			assert.Equal(t, true, got["state"].(map[string]any)["decision"].(map[string]any)["allowed"])
			require.Equal(t, 200, api(), "granted")
			require.Equal(t, 429, api(), "one request only")

			// The login limit is there too; the API is not served there.
			status, got = d.admin("GET", "state?limiter=login&key="+ip, "t0ken", nil)
			require.Equal(t, 200, status, "%v", got)
			assert.Equal(t, false, got["tracked"])
			status, _ = d.admin("GET", "", "t0ken", nil)
			assert.Equal(t, 404, status)
			assert.Equal(t, 404, d.get("/admin/ratekit/limiters", "Authorization", "Bearer t0ken").status, "not on the API's listener")
		})
	}
}

// TestAdminGeneratedToken: on a loopback address without a token, the
// demo makes one and prints it once with a curl line; with -config only
// the login limiter is exposed.
func TestAdminGeneratedToken(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rulesV1), 0o644))
	d := start(t, "-admin", "127.0.0.1:0", "-config", path)
	base := d.adminURL()
	m := regexp.MustCompile(`admin token \(generated; [^)]*\): (\S+)\n`).FindStringSubmatch(d.stderr.String())
	require.NotNil(t, m, "stderr: %s", d.stderr.String())
	token := m[1]
	assert.Len(t, token, 26)
	assert.Equal(t, 2, strings.Count(d.stderr.String(), token), "printed once, and in the curl line")
	assert.Contains(t, d.stderr.String(), "curl -H 'Authorization: Bearer "+token+"' "+base+"limiters\n")

	status, got := d.admin("GET", "limiters", token, nil)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, []any{"login"}, got["limiters"], "the rules are not exposed")
	status, _ = d.admin("GET", "limiters", "", nil)
	assert.Equal(t, 401, status)

	// Another start, another token.
	d2 := start(t, "-admin", "127.0.0.1:0")
	assert.NotContains(t, d2.stderr.String(), token)
	status, _ = d2.admin("GET", "limiters", token, nil)
	assert.Equal(t, 401, status)
}

// TestAdminTokenFromEnv: $RATEKIT_ADMIN_TOKEN is the token when
// -admin-token is not given.
func TestAdminTokenFromEnv(t *testing.T) {
	t.Setenv(adminTokenEnv, "from-env")
	d := start(t, "-admin", "127.0.0.1:0")
	assert.NotContains(t, d.stderr.String(), "generated")
	assert.NotContains(t, d.stderr.String(), "from-env")
	status, _ := d.admin("GET", "limiters", "from-env", nil)
	assert.Equal(t, 200, status)

	d = start(t, "-admin", "127.0.0.1:0", "-admin-token", "from-flag")
	status, _ = d.admin("GET", "limiters", "from-env", nil)
	assert.Equal(t, 401, status, "the flag wins")
	status, _ = d.admin("GET", "limiters", "from-flag", nil)
	assert.Equal(t, 200, status)
}

func TestAdminBadFlags(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	tests := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"-admin", "0.0.0.0:9091"}, []string{`-admin "0.0.0.0:9091" is not a loopback address`, "-admin-token", adminTokenEnv}},
		{[]string{"-admin", ":9091"}, []string{"not a loopback address"}},
		{[]string{"-admin", "[::]:9091"}, []string{"not a loopback address"}},
		{[]string{"-admin", "192.0.2.1:9091"}, []string{"not a loopback address"}},
		{[]string{"-admin", "ops.example:9091"}, []string{"not a loopback address"}},
		{[]string{"-admin", "127.0.0.1"}, []string{`-admin "127.0.0.1"`, "host:port"}},
		{[]string{"-admin", "127.0.0.1:"}, []string{"no port"}},
		{[]string{"-admin", "127.0.0.1:8080"}, []string{"must differ from -addr"}},
		{[]string{"-admin-token", "t0ken"}, []string{"-admin-token applies only with -admin"}},
		{[]string{"-admin", "127.0.0.1:9091", "-admin-token", ""}, []string{"-admin-token: must not be empty"}},
		{[]string{"-admin", "127.0.0.1:9091", "-admin-token", "two words"}, []string{"printable ASCII without spaces"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			require.Error(t, err)
			assert.Empty(t, stdout.String(), "nothing is served")
			var ue *cli.UsageError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, 2, cli.ExitCode("demo", err, &stderr))
			for _, w := range tt.want {
				assert.Contains(t, stderr.String(), w)
			}
		})
	}

	// With a token, any address will do.
	cfg, err := parseFlags([]string{"-admin", "0.0.0.0:9091", "-admin-token", "t0ken"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9091", cfg.admin)
	t.Setenv(adminTokenEnv, "from-env")
	cfg, err = parseFlags([]string{"-admin", ":9091"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "from-env", cfg.adminToken)
	for _, host := range []string{"127.0.0.1", "127.1.2.3", "::1", "localhost", "LocalHost", "::ffff:127.0.0.1"} {
		assert.True(t, isLoopback(host), host)
	}
	for _, host := range []string{"", "0.0.0.0", "::", "10.0.0.1", "localhost.example", "example.com"} {
		assert.False(t, isLoopback(host), host)
	}
}

// TestAdminListenError: an admin address in use stops the demo before it
// serves anything.
func TestAdminListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	goroutines := countGoroutines()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin", ln.Addr().String(), "-admin-token", "t0ken"}, &stdout, &stderr)
	require.ErrorContains(t, err, "-admin")
	assert.Empty(t, stdout.String())
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))
	waitGoroutines(t, goroutines)
}
