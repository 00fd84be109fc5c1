package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's own log lines; the tests read the command's
// output instead.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

const key = "ratekit:rules:cli-test"

// valid uses the application's keys plan and user.
const valid = `domain: api
descriptors:
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// result is what one run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPublishes: a valid file is stored under the key and announced; a
// file the application's engine would refuse is refused with its
// file:line errors, and the key keeps the version published before.
func TestPublishes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	sub := srv.Client(t).Subscribe(ctx, key+":changed")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr() + "/0"
	path := writeFile(t, valid)

	r := runCmd(t, "", "-redis", url, "-key", key, "-keys", "plan, tier,user", path)
	if r.code != 0 || r.stderr != "" || r.stdout != path+`: published under "`+key+`" (domain "api", 178 bytes)`+"\n" {
		t.Fatalf("got %+v", r)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != valid {
		t.Errorf("the key holds %q, %v", got, err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Channel != key+":changed" {
		t.Errorf("message %v, %v", msg, err)
	}

	for _, tc := range []struct {
		name  string
		file  string
		keys  string
		lines []string // of stderr
	}{
		{"invalid", "domain: api\ndescriptors:\n  - key: plan\n    rate_limt: {}\n  - kee: x\n", "plan", []string{
			`ratekit-rules: FILE:4: descriptors[0]: unknown key "rate_limt"`,
			`ratekit-rules: FILE:5: descriptors[1]: unknown key "kee"`,
		}},
		{"keys not registered", valid, "", []string{
			`ratekit-rules: FILE:3: descriptors[0].key: unknown descriptor key "plan"`,
			`ratekit-rules: FILE:6: descriptors[1].key: descriptor key user needs the engine option rules.WithUserKey`,
		}},
		{"user not registered", valid, "plan", []string{
			`ratekit-rules: FILE:6: descriptors[1].key: descriptor key user needs the engine option rules.WithUserKey`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file)
			r := runCmd(t, "", "-redis", url, "-key", key, "-keys", tc.keys, path)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if r.code != 1 || r.stdout != "" || len(lines) != len(tc.lines) {
				t.Fatalf("got %+v, want status 1 and %d lines", r, len(tc.lines))
			}
			for i, want := range tc.lines {
				if want = strings.Replace(want, "FILE", path, 1); !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d:\n got %s\nwant %s...", i+1, lines[i], want)
				}
			}
			if got, _ := rdb.Get(ctx, key).Result(); got != valid {
				t.Errorf("the key changed to %q", got)
			}
		})
	}

	// Standard input, and -dry-run, which needs no Redis.
	next := strings.Replace(valid, "100", "200", 1)
	r = runCmd(t, next, "-redis", url, "-key", key, "-keys", "plan,user", "-")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `-: published under "`+key+`"`) {
		t.Errorf("from standard input: got %+v", r)
	}
	if got, _ := rdb.Get(ctx, key).Result(); got != next {
		t.Errorf("the key holds %q", got)
	}
	r = runCmd(t, "", "-dry-run", "-keys", "plan,user", path)
	if r.code != 0 || r.stdout != path+`: valid (domain "api", 178 bytes); not published (-dry-run)`+"\n" {
		t.Errorf("-dry-run: got %+v", r)
	}
	if got, _ := rdb.Get(ctx, key).Result(); got != next {
		t.Errorf("-dry-run changed the key to %q", got)
	}

	srv.Stop(t)
	r = runCmd(t, "", "-redis", url, "-key", key, "-keys", "plan,user", path)
	if r.code != 1 || !strings.HasPrefix(r.stderr, `ratekit-rules: rulesredis: storing "`+key+`": `) {
		t.Errorf("with Redis down: got %+v", r)
	}
}

// TestBadArguments: every mistake is a message and a non-zero status,
// never a panic; nothing here contacts a Redis.
func TestBadArguments(t *testing.T) {
	path := writeFile(t, valid)
	large := filepath.Join(t.TempDir(), "large.yaml")
	if err := os.WriteFile(large, make([]byte, 4<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	const url = "redis://127.0.0.1:1/0" // never dialed: each case fails first
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no file", []string{"-redis", url, "-key", key}, 2, "want one rules file (or - for standard input), got 0 arguments"},
		{"two files", []string{"-redis", url, "-key", key, path, path}, 2, "got 2 arguments"},
		{"no key", []string{"-redis", url, path}, 2, "-key is required"},
		{"no redis", []string{"-key", key, path}, 2, "-redis is required"},
		{"bad URL", []string{"-redis", "redis://h:1/notadb", "-key", key, path}, 2, `-redis "redis://h:1/notadb": `},
		{"bad cluster address", []string{"-redis", "h1:1,h2", "-key", key, path}, 2, `"h2" is not host:port`},
		{"built-in key in -keys", []string{"-redis", url, "-key", key, "-keys", "remote_address", path}, 2, `-keys "remote_address": rules: WithKey("remote_address"): name is empty or taken by a built-in key (list only`},
		{"header key in -keys", []string{"-redis", url, "-key", key, "-keys", "header:X", path}, 2, `-keys "header:X"`},
		{"unknown flag", []string{"-redis", url, "-key", key, "-force", path}, 2, "flag provided but not defined: -force"},
		{"missing file", []string{"-redis", url, "-key", key, path + ".missing"}, 1, "no such file or directory"},
		{"too large", []string{"-redis", url, "-key", key, large}, 1, large + ": rulesredis: rules document larger than 4 MiB"},
		{"help", []string{"-h"}, 0, "usage: ratekit-rules -redis URL -key KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, "", tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("got status %d, stdout %q, stderr:\n%s\nwant status %d and %q", r.code, r.stdout, r.stderr, tc.code, tc.want)
			}
		})
	}
}
