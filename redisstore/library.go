package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/redisstore/internal/servers"
)

// This file holds the store's code in Redis: decide.lua, built into a
// Function library and a script, and its loading.

//go:embed decide.lua
var decideSource string

// The code of decide.lua, as a Function library loaded once per server
// and as an EVAL script for servers without Functions. The library's and
// functions' names carry a hash of the code, so that servers running two
// versions of this package side by side (a rolling deploy) each call
// their own.
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
	scriptSource = decideSource + "\nreturn many(KEYS, ARGV, false)\n"
	decideScript = redis.NewScript(scriptSource)
)

// load loads the function library on every master, or falls back to the
// script where Functions are missing (Redis before 7.0) or refused (an
// ACL without FUNCTION, a managed service).
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
		s.scripts.Store(false)
	case noFunctions(err):
		s.scripts.Store(true)
		return nil
	}
	return err
}

// noFunctions reports an answer to FUNCTION LOAD that says the server
// will not run Functions for this client.
func noFunctions(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM") ||
		redis.HasErrorPrefix(err, "unknown subcommand")
}
