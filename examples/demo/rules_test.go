package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratekit/ratekit/examples/demo/internal/demo"
	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
	"github.com/ratekit/ratekit/internal/cli"
)

// TestRulesFile runs the demo with -config: the file's rules decide GET /
// and also apply to POST /login; an edit applies while it runs, keeping
// the counts; an invalid edit is logged and ignored
// (demotest.CheckRulesFile).
func TestRulesFile(t *testing.T) { demotest.CheckRulesFile(t, demo.StdHTTP) }

// TestRulesFileErrors: -config excludes the flags of the limit, and an
// invalid file stops the demo with its file:line errors.
func TestRulesFileErrors(t *testing.T) {
	err := run(t.Context(), []string{"-config", "x.yaml", "-limit", "5"}, &strings.Builder{}, &strings.Builder{})
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
