package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/internal/cli"
)

// TestAdmin exhausts a client's limit, then operates on it through the
// admin listener: state, reset and grant, each only with the bearer token.
func TestAdmin(t *testing.T) { demotest.CheckAdmin(t, demo.StdHTTP) }

// adminTokenEnv is the environment variable that may hold the admin token.
const adminTokenEnv = "RATEKIT_ADMIN_TOKEN"

// TestAdminGeneratedToken: on a loopback address without a token, the
// demo makes one and prints it once with a curl line; with -config only
// the login limiter is exposed.
func TestAdminGeneratedToken(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	d := start(t, "-admin", "127.0.0.1:0", "-config", demotest.WriteRules(t))
	base := d.AdminURL()
	m := regexp.MustCompile(`admin token \(generated; [^)]*\): (\S+)\n`).FindStringSubmatch(d.Stderr())
	require.NotNil(t, m, "stderr: %s", d.Stderr())
	token := m[1]
	assert.Len(t, token, 26)
	assert.Equal(t, 2, strings.Count(d.Stderr(), token), "printed once, and in the curl line")
	assert.Contains(t, d.Stderr(), "curl -H 'Authorization: Bearer "+token+"' "+base+"limiters\n")

	status, got := d.Admin("GET", "limiters", token, nil)
	require.Equal(t, 200, status, "%v", got)
	assert.Equal(t, []any{"login"}, got["limiters"], "the rules are not exposed")
	status, _ = d.Admin("GET", "limiters", "", nil)
	assert.Equal(t, 401, status)

	// Another start, another token.
	d2 := start(t, "-admin", "127.0.0.1:0")
	assert.NotContains(t, d2.Stderr(), token)
	status, _ = d2.Admin("GET", "limiters", token, nil)
	assert.Equal(t, 401, status)
}

// TestAdminTokenFromEnv: $RATEKIT_ADMIN_TOKEN is the token when
// -admin-token is not given.
func TestAdminTokenFromEnv(t *testing.T) {
	t.Setenv(adminTokenEnv, "from-env")
	d := start(t, "-admin", "127.0.0.1:0")
	assert.NotContains(t, d.Stderr(), "generated")
	assert.NotContains(t, d.Stderr(), "from-env")
	status, _ := d.Admin("GET", "limiters", "from-env", nil)
	assert.Equal(t, 200, status)

	d = start(t, "-admin", "127.0.0.1:0", "-admin-token", "from-flag")
	status, _ = d.Admin("GET", "limiters", "from-env", nil)
	assert.Equal(t, 401, status, "the flag wins")
	status, _ = d.Admin("GET", "limiters", "from-flag", nil)
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
}

// TestAdminListenError: an admin address in use stops the demo before it
// serves anything.
func TestAdminListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	goroutines := demotest.CountGoroutines()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin", ln.Addr().String(), "-admin-token", "t0ken"}, &stdout, &stderr)
	require.ErrorContains(t, err, "-admin")
	assert.Empty(t, stdout.String())
	assert.Equal(t, 1, cli.ExitCode("demo", err, &stderr))
	demotest.WaitGoroutines(t, goroutines)
}
