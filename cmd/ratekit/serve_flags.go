package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/cli"
)

// serveConfig is what the flags and the environment of `ratekit serve`
// say, checked.
type serveConfig struct {
	config         string   // a file or a directory; "" with rulesKeys
	rulesKeys      []string // Redis keys holding a domain's rules each
	watchInterval  time.Duration
	grpcAddr       string
	httpAddr       string
	store          string // memory, redis or hybrid
	redisAddr      string
	redisPassword  string // from RATEKIT_REDIS_PASSWORD only
	hybridInterval time.Duration
	region         string
	peers          map[string]string // region name → Redis address
	failClosed     bool
	shadow         bool
	overLimitCache bool
	respHeaders    bool
	limitOverrides bool
	maxMsgBytes    int
	maxStreams     int
	shutdown       time.Duration
	logLevel       slog.Level
	logJSON        bool
}

// envPassword is the environment variable of the Redis password, which no
// flag takes, so that it never shows in a process listing.
const envPassword = "RATEKIT_REDIS_PASSWORD"

// serveEnv names the environment variable of each flag. The lists (-peer,
// -rules-redis-key) take comma-separated values there.
var serveEnv = map[string]string{
	"config":            "RATEKIT_CONFIG",
	"rules-redis-key":   "RATEKIT_RULES_REDIS_KEYS",
	"watch-interval":    "RATEKIT_WATCH_INTERVAL",
	"grpc":              "RATEKIT_GRPC_ADDR",
	"http":              "RATEKIT_HTTP_ADDR",
	"store":             "RATEKIT_STORE",
	"redis":             "RATEKIT_REDIS_ADDR",
	"hybrid-interval":   "RATEKIT_HYBRID_INTERVAL",
	"region":            "RATEKIT_REGION",
	"peer":              "RATEKIT_PEERS",
	"fail":              "RATEKIT_FAIL",
	"shadow":            "RATEKIT_SHADOW",
	"over-limit-cache":  "RATEKIT_OVER_LIMIT_CACHE",
	"response-headers":  "RATEKIT_RESPONSE_HEADERS",
	"limit-overrides":   "RATEKIT_LIMIT_OVERRIDES",
	"max-message-bytes": "RATEKIT_MAX_MESSAGE_BYTES",
	"max-streams":       "RATEKIT_MAX_STREAMS",
	"shutdown-timeout":  "RATEKIT_SHUTDOWN_TIMEOUT",
	"log-level":         "RATEKIT_LOG_LEVEL",
	"log-format":        "RATEKIT_LOG_FORMAT",
}

// listEnv are the flags whose variable holds a comma-separated list.
var listEnv = map[string]bool{"rules-redis-key": true, "peer": true}

const (
	defaultMaxMsgBytes = 1 << 20
	maxMaxMsgBytes     = 64 << 20
	defaultMaxStreams  = 1000
	maxMaxStreams      = 1 << 20
)

// listFlag is a repeatable flag of non-empty values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	if v = strings.TrimSpace(v); v == "" {
		return errors.New("empty value")
	}
	if slices.Contains(*l, v) {
		return fmt.Errorf("%q given twice", v)
	}
	*l = append(*l, v)
	return nil
}

// peerFlag is -peer NAME=ADDR, repeatable.
type peerFlag map[string]string

func (p peerFlag) String() string { return "" }

func (p peerFlag) Set(v string) error {
	name, addr, ok := strings.Cut(strings.TrimSpace(v), "=")
	name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
	if !ok || name == "" || addr == "" {
		return errors.New("want NAME=ADDR, such as eu=10.1.0.5:6379")
	}
	if err := checkRegion(name); err != nil {
		return err
	}
	if _, dup := p[name]; dup {
		return fmt.Errorf("region %q given twice", name)
	}
	if err := checkRedisAddr(addr); err != nil {
		return err
	}
	p[name] = addr
	return nil
}

// checkRegion checks a region's name as package hybrid wants it.
func checkRegion(name string) error {
	if name == "" || len(name) > 32 || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return fmt.Errorf("region name %q: want 1 to 32 letters, digits, '-' or '_'", name)
	}
	return nil
}

// checkRedisAddr checks a Redis address: host:port, or a redis:// or
// rediss:// (TLS) URL without a password.
func checkRedisAddr(addr string) error {
	if strings.HasPrefix(addr, "redis://") || strings.HasPrefix(addr, "rediss://") {
		o, err := redis.ParseURL(addr)
		if err != nil {
			return fmt.Errorf("not a Redis URL: %v", err)
		}
		if o.Password != "" {
			return fmt.Errorf("a password in the URL shows in process listings: set %s instead", envPassword)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("%q is not HOST:PORT (or a redis:// or rediss:// URL)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port must be 1 to 65535", addr)
	}
	return nil
}

// redisOptions are the go-redis options of a checked address.
func redisOptions(addr, password string) *redis.Options {
	var o *redis.Options
	if strings.HasPrefix(addr, "redis://") || strings.HasPrefix(addr, "rediss://") {
		o, _ = redis.ParseURL(addr) // checked by checkRedisAddr
	} else {
		o = &redis.Options{Addr: addr}
	}
	if password != "" {
		o.Password = password
	}
	// Deadlines of contexts bound every command: the stores' timeouts.
	o.ContextTimeoutEnabled = true
	return o
}

// newServeFlags defines the flags of ratekit serve on a flag set, and
// returns with it the function that checks their values once parsed; src
// names where a flag's value came from, for the messages.
func newServeFlags(stderr io.Writer) (*flag.FlagSet, func(src func(string) string) (*serveConfig, error)) {
	fs := flag.NewFlagSet("ratekit serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		keys    listFlag
		peers   = peerFlag{}
		config  = fs.String("config", "", "the rate limit config, in the Envoy rate limit service's format: a YAML `path`, or a directory whose *.yaml and *.yml files each hold one domain; reloaded when a file changes, is added or is removed")
		watch   = fs.Duration("watch-interval", 2*time.Second, "how often the config directory is scanned for added and removed files, and each file polled for changes that notifications miss")
		grpcA   = fs.String("grpc", ":8081", "the gRPC listen `address`: the rate limit service, gRPC health and server reflection")
		httpA   = fs.String("http", ":8080", "the HTTP listen `address`: GET /healthcheck, GET /metrics, POST /json")
		store   = fs.String("store", "memory", "`kind` of store that keeps the counts (valid: memory, redis, hybrid)")
		redisA  = fs.String("redis", "", "the Redis `address`, HOST:PORT or a redis:// or rediss:// URL, for -store redis or hybrid and -rules-redis-key; its password is read from "+envPassword)
		hybridI = fs.Duration("hybrid-interval", time.Second, "with -store hybrid: how often each server syncs its counts with Redis")
		region  = fs.String("region", "", "with -store hybrid: this region's `name`, whose counts are shared with the regions of -peer")
		fail    = fs.String("fail", "open", "the decisions' `mode` when the store fails: open admits, closed answers UNAVAILABLE, which Envoy's failure_mode_deny decides (valid: open, closed)")
		shadow  = fs.Bool("shadow", false, "shadow mode: count and report, but answer every request OK")
		olcache = fs.Bool("over-limit-cache", true, "with -store redis: answer a key that Redis just rejected from memory until its retry time, with Redis's numbers, instead of asking Redis again")
		headers = fs.Bool("response-headers", false, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to the answers, for Envoy to add to its responses")
		overr   = fs.Bool("limit-overrides", true, "honour the limit a descriptor carries (Envoy's per-route limit override) instead of the configured one, as envoyproxy/ratelimit does; -limit-overrides=false applies the configured one")
		maxMsg  = fs.Int("max-message-bytes", defaultMaxMsgBytes, "the largest gRPC request, in `bytes` (1024 to 67108864)")
		streams = fs.Int("max-streams", defaultMaxStreams, "the most concurrent gRPC streams per connection, `n` from 1 to 1048576")
		shut    = fs.Duration("shutdown-timeout", 15*time.Second, "how long a shutdown waits for requests in flight before it closes the connections")
		level   = fs.String("log-level", "info", "the least `level` logged (valid: debug, info, warn, error)")
		format  = fs.String("log-format", "text", "the log `format` on standard error (valid: text, json)")
	)
	fs.Var(&keys, "rules-redis-key", "instead of -config: a Redis `key` holding one domain's rules (rulesredis), reloaded when it changes (repeatable)")
	fs.Var(peers, "peer", "with -store hybrid and -region: another region and its Redis, `NAME=ADDR` (repeatable)")
	fs.VisitAll(func(f *flag.Flag) {
		env := serveEnv[f.Name]
		if listEnv[f.Name] {
			env += ", comma-separated"
		}
		f.Usage += " (env " + env + ")"
	})
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	check := func(src func(string) string) (*serveConfig, error) {
		c := &serveConfig{
			config: *config, rulesKeys: keys, watchInterval: *watch, grpcAddr: *grpcA, httpAddr: *httpA,
			store: *store, redisAddr: *redisA, hybridInterval: *hybridI, region: *region, peers: peers,
			shadow: *shadow, overLimitCache: *olcache, respHeaders: *headers, limitOverrides: *overr,
			maxMsgBytes: *maxMsg, maxStreams: *streams, shutdown: *shut,
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		return checkServe(c, set, src, *fail, *level, *format)
	}
	return fs, check
}

const serveUsage = `usage: ratekit serve [flags]

Runs Envoy's rate limit service (gRPC envoy.service.ratelimit.v3) on ratekit's
rules and stores. A flag beats its environment variable. The Redis password is
read from ` + envPassword + ` only. Manual: docs/serve.md.

`

// parseServe parses the arguments of ratekit serve, taking the flags not
// given from the environment (lookup), and checks them: a *cli.UsageError
// for anything wrong.
func parseServe(args []string, lookup func(string) (string, bool), stderr io.Writer) (*serveConfig, error) {
	for _, a := range args {
		if n := strings.TrimLeft(a, "-"); n != a && (n == "redis-password" || strings.HasPrefix(n, "redis-password=")) {
			return nil, cli.Usagef("-redis-password: not a flag, so that the password never shows in a process listing; set %s", envPassword)
		}
	}
	fs, check := newServeFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, cli.Reported(err)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("unexpected argument %q: ratekit serve takes flags only", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fromEnv := map[string]bool{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := serveEnv[f.Name]
		v, ok := lookup(env)
		if err != nil || given[f.Name] || !ok || strings.TrimSpace(v) == "" {
			return
		}
		fromEnv[f.Name] = true
		vals := []string{v}
		if listEnv[f.Name] {
			vals = strings.Split(v, ",")
		}
		for _, v := range vals {
			if serr := fs.Set(f.Name, strings.TrimSpace(v)); serr != nil {
				err = cli.Usagef("%s=%q: %v", env, v, serr)
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	cfg, err := check(func(name string) string {
		if fromEnv[name] {
			return serveEnv[name]
		}
		return "-" + name
	})
	if err != nil {
		return nil, err
	}
	cfg.redisPassword, _ = lookup(envPassword)
	return cfg, nil
}

// checkServe checks the values of the flags; set holds the flags given
// (on the command line or in the environment), src names a flag's source.
func checkServe(c *serveConfig, set map[string]bool, src func(string) string, fail, level, format string) (*serveConfig, error) {
	switch {
	case c.config == "" && len(c.rulesKeys) == 0:
		return nil, cli.Usagef("no rules: give -config PATH (a YAML file, or a directory of them) or -rules-redis-key KEY")
	case c.config != "" && len(c.rulesKeys) > 0:
		return nil, cli.Usagef("%s and %s: give one source of rules, not both", src("config"), src("rules-redis-key"))
	}
	if c.watchInterval < 10*time.Millisecond || c.watchInterval > time.Hour {
		return nil, cli.Usagef("%s %s: must be from 10ms to 1h", src("watch-interval"), c.watchInterval)
	}
	if strings.TrimSpace(c.grpcAddr) == "" {
		return nil, cli.Usagef("%s: needs an address, such as :8081 or 127.0.0.1:8081", src("grpc"))
	}
	if strings.TrimSpace(c.httpAddr) == "" {
		return nil, cli.Usagef("%s: needs an address, such as :8080 or 127.0.0.1:8080", src("http"))
	}
	switch c.store {
	case "memory", "redis", "hybrid":
	default:
		return nil, cli.Usagef("%s %q: unknown store (valid: memory, redis, hybrid)", src("store"), c.store)
	}
	switch needRedis := c.store != "memory" || len(c.rulesKeys) > 0; {
	case needRedis && c.redisAddr == "" && c.store != "memory":
		return nil, cli.Usagef("%s %s needs -redis ADDR", src("store"), c.store)
	case needRedis && c.redisAddr == "":
		return nil, cli.Usagef("%s needs -redis ADDR", src("rules-redis-key"))
	case !needRedis && c.redisAddr != "":
		return nil, cli.Usagef("%s applies only with -store redis or hybrid, or -rules-redis-key", src("redis"))
	}
	if c.redisAddr != "" {
		if err := checkRedisAddr(c.redisAddr); err != nil {
			return nil, cli.Usagef("%s: %v", src("redis"), err)
		}
	}
	if c.store != "hybrid" {
		for _, f := range []string{"hybrid-interval", "region", "peer"} {
			if set[f] {
				return nil, cli.Usagef("%s applies only with -store hybrid", src(f))
			}
		}
	}
	if c.hybridInterval < 10*time.Millisecond || c.hybridInterval > time.Minute {
		return nil, cli.Usagef("%s %s: must be from 10ms to 1m", src("hybrid-interval"), c.hybridInterval)
	}
	switch {
	case c.region == "" && len(c.peers) > 0:
		return nil, cli.Usagef("%s needs -region, this region's name", src("peer"))
	case c.region != "" && len(c.peers) == 0:
		return nil, cli.Usagef("%s needs -peer NAME=ADDR for at least one other region", src("region"))
	case c.region != "":
		if err := checkRegion(c.region); err != nil {
			return nil, cli.Usagef("%s: %v", src("region"), err)
		}
		if _, ok := c.peers[c.region]; ok {
			return nil, cli.Usagef("%s %s: that is this region (-region); peers are the other regions", src("peer"), c.region)
		}
	}
	switch fail {
	case "open":
	case "closed":
		c.failClosed = true
	default:
		return nil, cli.Usagef("%s %q: unknown mode (valid: open, closed)", src("fail"), fail)
	}
	if c.maxMsgBytes < 1024 || c.maxMsgBytes > maxMaxMsgBytes {
		return nil, cli.Usagef("%s %d: must be from 1024 to %d (64 MiB)", src("max-message-bytes"), c.maxMsgBytes, maxMaxMsgBytes)
	}
	if c.maxStreams < 1 || c.maxStreams > maxMaxStreams {
		return nil, cli.Usagef("%s %d: must be from 1 to %d", src("max-streams"), c.maxStreams, maxMaxStreams)
	}
	if c.shutdown <= 0 || c.shutdown > time.Hour {
		return nil, cli.Usagef("%s %s: must be positive and at most 1h", src("shutdown-timeout"), c.shutdown)
	}
	switch strings.ToLower(level) {
	case "debug":
		c.logLevel = slog.LevelDebug
	case "info":
		c.logLevel = slog.LevelInfo
	case "warn", "warning":
		c.logLevel = slog.LevelWarn
	case "error":
		c.logLevel = slog.LevelError
	default:
		return nil, cli.Usagef("%s %q: unknown level (valid: debug, info, warn, error)", src("log-level"), level)
	}
	switch format {
	case "text":
	case "json":
		c.logJSON = true
	default:
		return nil, cli.Usagef("%s %q: unknown format (valid: text, json)", src("log-format"), format)
	}
	return c, nil
}
