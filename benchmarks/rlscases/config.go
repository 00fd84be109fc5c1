package rlscases

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

//go:embed testdata/config/*.yaml testdata/reload.yaml
var testdata embed.FS

// ReloadFile is the name RunReload gives the file it adds to a
// configuration directory.
const ReloadFile = "reload.yaml"

// WriteConfig writes the configuration the cases need into dir, one YAML
// file per domain, creating dir if needed. dir is the directory a service
// reads its configuration from: the reference's
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, or ratekit serve's -config.
func WriteConfig(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := fs.Glob(testdata, "testdata/config/*.yaml")
	if err != nil {
		return err
	}
	for _, name := range files {
		b, err := testdata.ReadFile(name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, path.Base(name)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// reloadPoll is the pause between two requests while RunReload waits for
// a service to pick up a change of its configuration.
const reloadPoll = 50 * time.Millisecond

// RunReload checks that a service picks up a configuration file added to
// and removed from its configuration directory dir while it runs, as the
// reference's reload test does: before, domain "reload" is unknown; once
// the file is in, reload/key1 has a limit of 50 a second (and reload/block
// a limit of 0, so is over it); once the file is gone, the domain is
// unknown again. It waits up to timeout for each change. The file is
// written next to dir and renamed into it, so that the service never sees
// it half written. The differences are returned under the case name
// "reload".
func RunReload(ctx context.Context, conn grpc.ClientConnInterface, dir string, timeout time.Duration) []Diff {
	client := rlsv3.NewRateLimitServiceClient(conn)
	c := Case{Name: "reload", From: "reference test/integration testConfigReload"}
	token := newToken()
	var out []Diff
	check := func(step int, r Request, want Answer) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := client.ShouldRateLimit(cctx, r.proto(token))
		cancel()
		if fields := Compare(want, resp, err); len(fields) > 0 {
			out = append(out, Diff{Case: c.Name, Step: step, Detail: strings.Join(fields, "; "), Got: FormatResponse(resp, err), Want: want.String()})
		}
	}
	fail := func(step int, err error) []Diff {
		return append(out, Diff{Case: c.Name, Step: step, Detail: err.Error()})
	}

	check(0, req("reload", d("block", RunToken)), answer(OK, none()))

	b, err := testdata.ReadFile("testdata/reload.yaml")
	if err != nil {
		return fail(1, err)
	}
	tmp := filepath.Join(filepath.Dir(filepath.Clean(dir)), "."+ReloadFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fail(1, err)
	}
	target := filepath.Join(dir, ReloadFile)
	if err := os.Rename(tmp, target); err != nil {
		_ = os.Remove(tmp)
		return fail(1, err)
	}
	removed := false
	defer func() {
		if !removed {
			_ = os.Remove(target)
		}
	}()
	if err := waitLimit(ctx, client, true, timeout); err != nil {
		return fail(1, fmt.Errorf("after adding %s: %w", ReloadFile, err))
	}
	check(1, req("reload", d("key1", RunToken)), answer(OK, ok(lim(50, Second), 49)))
	check(2, req("reload", d("block", RunToken)), answer(OverLimit, over(lim(0, Second))))

	if err := os.Remove(target); err != nil {
		return fail(3, err)
	}
	removed = true
	if err := waitLimit(ctx, client, false, timeout); err != nil {
		return fail(3, fmt.Errorf("after removing %s: %w", ReloadFile, err))
	}
	check(3, req("reload", d("key1", RunToken)), answer(OK, none()))
	return out
}

// waitLimit asks for reload/one_per_minute with a new value every
// reloadPoll until the answer has a limit (present true) or has none
// (present false), for at most timeout.
func waitLimit(ctx context.Context, client rlsv3.RateLimitServiceClient, present bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		r := req("reload", d("one_per_minute", RunToken))
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := client.ShouldRateLimit(cctx, r.proto(newToken()))
		cancel()
		if err == nil && len(resp.GetStatuses()) == 1 && (resp.GetStatuses()[0].GetCurrentLimit() != nil) == present {
			return nil
		}
		last = FormatResponse(resp, err)
		if time.Now().After(deadline) {
			return fmt.Errorf("no change within %s (last answer: %s)", timeout, last)
		}
		t := time.NewTimer(reloadPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), fmt.Errorf("last answer: %s", last))
		case <-t.C:
		}
	}
}
