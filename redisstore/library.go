package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/internal/servers"
)

// This file holds the store's code in Redis: decide.lua, built into a
// Function library and into scripts, and its loading.

//go:embed decide.lua
var decideSource string

// The code of decide.lua, as a Function library loaded once per server
// and as EVAL scripts for servers where Functions are refused. The
// library's and functions' names carry a hash of the code, so that servers
// running two versions of this package side by side (a rolling deploy)
// each call their own.
//
// Each comes in two forms: the one Redis refuses up front when it is out
// of memory (maxmemory), as it refuses any write, and the one that may
// write then (the allow-oom flag), which decides clients that have keys
// and creates none (decide.lua's full). The scripts carry their flags in
// a shebang line (Redis 7.0); Redis before 7.0 reads no shebang, and runs
// the plain script (oldScript), which Redis refuses only at its first
// write when it is out of memory, and has no form that may write then.
var (
	codeHash      = func() string { h := sha256.Sum256([]byte(decideSource)); return hex.EncodeToString(h[:6]) }()
	libraryName   = "ratekit_" + codeHash
	functionTake  = libraryName
	functionFull  = libraryName + "_full"
	librarySource = "#!lua name=" + libraryName + "\n" + decideSource + `
redis.register_function('` + functionTake + `', function(keys, argv) return many(keys, argv, false) end)
redis.register_function{function_name = '` + functionFull + `', flags = {'allow-oom'},
  callback = function(keys, argv) return many(keys, argv, true) end}
`
	takeSource = "#!lua\n" + decideSource + "\nreturn many(KEYS, ARGV, false)\n"
	fullSource = "#!lua flags=allow-oom\n" + decideSource + "\nreturn many(KEYS, ARGV, true)\n"
	oldSource  = decideSource + "\nreturn many(KEYS, ARGV, false)\n"
	takeScript = redis.NewScript(takeSource)
	fullScript = redis.NewScript(fullSource)
	oldScript  = redis.NewScript(oldSource)
)

// How the store runs its code (Store.code).
const (
	codeFunctions  = iota // the library: FCALL
	codeScripts           // the scripts with a shebang: EVALSHA, EVAL
	codeOldScripts        // the plain script, for Redis before 7.0
)

// load loads the function library on every master or, where Functions are
// missing or refused (an ACL without FUNCTION, a managed service), the
// scripts: with their shebang, unless a master cannot compile it (Redis
// before 7.0). A master that refuses SCRIPT LOAD still gets the scripts
// by EVAL when NOSCRIPT says it lacks them.
func (s *Store) load(ctx context.Context) error {
	err := servers.EachMaster(ctx, s.client, func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, librarySource).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	})
	switch {
	case err == nil:
		s.code.Store(codeFunctions)
		return nil
	case !noFunctions(err):
		return err
	}
	var old atomic.Bool // masters are loaded concurrently on a cluster
	err = servers.EachMaster(ctx, s.client, func(ctx context.Context, c *redis.Client) error {
		for _, script := range []*redis.Script{takeScript, fullScript} {
			err := script.Load(ctx, c).Err()
			switch {
			case err == nil, redis.HasErrorPrefix(err, "NOPERM"), redis.HasErrorPrefix(err, "OOM"):
			case noShebang(err):
				old.Store(true)
				return nil
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if old.Load() {
		s.code.Store(codeOldScripts)
	} else {
		s.code.Store(codeScripts)
	}
	return nil
}

// noFunctions reports an answer to FUNCTION LOAD that says the server
// will not run Functions for this client.
func noFunctions(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM") ||
		redis.HasErrorPrefix(err, "unknown subcommand")
}

// noShebang reports an answer to SCRIPT LOAD that says the server cannot
// compile a script's shebang line: Redis before 7.0, whose Lua reads the
// line as code.
func noShebang(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Error compiling script") || strings.Contains(msg, "shebang")
}
