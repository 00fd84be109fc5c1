// Command demo serves a small HTTP API guarded by ratekit, to try the
// algorithms, header styles, key functions and framework adapters from the
// command line:
//
//	go run ./examples/demo -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// Routes:
//
//	GET  /         "hello", limited as the flags say
//	GET  /healthz  "ok", never limited
//	GET  /metrics  with -metrics: Prometheus metrics, never limited
//	POST /login    its own strict limit: 5 per minute per client IP
//	               (fixed window), counted apart from the rest
//	POST /orders   2 per second per client IP; over it, the order is
//	               queued (202 Accepted and its ID) and placed later by a
//	               worker at 2 per second, which logs it (orders.go)
//	POST /reports  a slow report: ?ms= milliseconds of work (default
//	               1000, at most 5000); 10 per minute per client IP, then
//	               at most 2 at once per client IP, the third answered 429
//	               (reports.go)
//	GET  /upstream calls a provider through a client paced to 5 calls a
//	               second (bursts of 2): over the pace a call waits its
//	               turn, at most 5 s, and is not answered 429; answers the
//	               provider's status and the wait (upstream.go). Not
//	               limited itself.
//
// Every other request (another path, or another method on one of these
// paths) is limited like GET / and answers 404.
//
//	curl -i -X POST 'http://127.0.0.1:8080/reports?ms=3000' &
//	curl -i -X POST 'http://127.0.0.1:8080/reports?ms=3000' &
//	curl -i -X POST http://127.0.0.1:8080/reports   # 429: 2 at work already
//	for i in 1 2 3 4 5 6; do curl -s http://127.0.0.1:8080/upstream & done; wait
//
// The slots of POST /reports are leases in memory or, with -store redis or
// hybrid, in Redis, shared by every demo server on it. The pace of GET
// /upstream is a token bucket in memory or, with -store redis or hybrid,
// in Redis, where the demo servers on it share one pace per provider host.
// Its provider is -upstream URL or, by default, one the demo serves on a
// loopback port, limited by ratekit to 5 calls a second (bursts of 5) for
// all callers. To see a fleet share a provider, make the provider another
// demo server, whose GET / counts all calls from one host against one
// limit:
//
//	go run ./examples/demo -addr 127.0.0.1:9000 -algorithm token-bucket -limit 5 -period 1s &
//	go run ./examples/demo -store redis -upstream http://127.0.0.1:9000/ -addr 127.0.0.1:8080 &
//	go run ./examples/demo -store redis -upstream http://127.0.0.1:9000/ -addr 127.0.0.1:8081 &
//
// With -elastic PERCENT (1 to 1000) the flag-built limit of GET / admits
// up to PERCENT% more requests while this server has fewer than
// -elastic-in-flight requests in flight (default 100, the one decided
// included), counted by a concurrency limiter around every route, and is
// exact when it has as many (elastic.go). An elastic admission has
// X-RateLimit-Remaining 0 and, with -metrics, counts as
// decision="elastic_allowed". It needs the flag-built limit (not -config)
// and -store memory or redis (not hybrid).
//
//	go run ./examples/demo -limit 5 -elastic 100 -metrics
//
// -framework chooses the router and ratekit middleware that serve these
// routes: stdhttp (net/http's ServeMux and package stdhttp, the default),
// gin (ratekitgin), echo or echo5 (ratekitecho, ratekitecho5 for Echo v5),
// fiber or fiber3 (ratekitfiber, ratekitfiber3 for Fiber v3) or chi
// (ratekitchi). The limiters are the same whichever it is, built once from
// the flags, and so are the answers: status, rate-limit headers and
// problem-details body.
//
//	go run ./examples/demo -framework gin
//	go run ./examples/demo -framework fiber -key header:X-API-Key
//
// With -config FILE the limits of GET / (and of every other request) come
// from a rules file instead of the flags: the schema of the Envoy
// rate-limit service plus ratekit's extensions (see package rulesfile and
// examples/rules/demo.yaml). Its rules also apply to POST /login, after
// the login limit (whose headers they then replace), so a rule can target
// it. The file is watched: a valid
// edit applies within a second or two, keeping the counts, and an invalid
// one is logged to standard error and ignored.
//
//	go run ./examples/demo -config examples/rules/demo.yaml
//
// -config redis://HOST:PORT/DB/KEY (or rediss://, with a user and password
// as in -redis) takes the rules document from the Redis key KEY instead,
// as a fleet of servers shares it (package rulesredis): the demo loads it
// at start, failing if the key is missing or invalid, and applies each
// version published with the ratekit-rules command within milliseconds.
// An invalid version, or a Redis outage, is logged and the rules stay.
// KEY is the rest of the URL's path, percent-encoded where needed; it is
// independent of -store, whose Redis may be another.
//
//	go run ./rulesredis/cmd/ratekit-rules -redis redis://127.0.0.1:6379/0 -key ratekit:rules:demo examples/rules/demo.yaml
//	go run ./examples/demo -config redis://127.0.0.1:6379/0/ratekit:rules:demo
//
// With -store redis the counters live in Redis, so several demo servers
// on one Redis share their limits, whatever their frameworks:
//
//	go run ./examples/demo -store redis -redis redis://127.0.0.1:6379/0 -addr 127.0.0.1:8080 &
//	go run ./examples/demo -store redis -redis redis://127.0.0.1:6379/0 -addr 127.0.0.1:8081 -framework echo &
//
// With -store hybrid each demo server decides requests in its own memory,
// on leases of the limit that it takes from the Redis of -redis in
// batches, and syncs with that Redis every -sync-interval (default 1s):
// most requests cost no round trip, and the servers on one Redis still
// admit the limit exactly between them (package redisstore, NewHybrid).
// Its counts merge by adding, so it takes fixed-window and
// sliding-window-counter limits (the login limit is a fixed window); with
// a bucket or a log for -algorithm the demo refuses to start.
//
//	go run ./examples/demo -store hybrid -redis redis://127.0.0.1:6379/0 -sync-interval 500ms
//
// For several data centres, each with its own Redis, give each server its
// region with -region NAME and the Redis of every other region with
// -peer NAME=URL (repeat the flag, or separate them with commas; URL as in
// -redis). Each region counts in its own Redis, and its servers send the
// region's counts to the others every sync interval. A region decides on
// what it has heard, so until the others' counts arrive (a sync interval
// or two) the regions together may admit beyond the limit what arrives in
// each meanwhile; after that, a client that used up the limit in one
// region is rejected in every region.
//
//	go run ./examples/demo -store hybrid -redis redis://127.0.0.1:6379/0 -region eu -peer us=redis://127.0.0.1:6380/0 -addr 127.0.0.1:8080 &
//	go run ./examples/demo -store hybrid -redis redis://127.0.0.1:6380/0 -region us -peer eu=redis://127.0.0.1:6379/0 -addr 127.0.0.1:8081 &
//
// -overlimit-cache (with -store redis or hybrid) puts a cache of
// rejections in front of the store (package overlimit): a client over its
// limit is answered from the server's memory, with the same headers, until
// its Retry-After has passed, instead of asking Redis on every request.
//
//	go run ./examples/demo -store redis -redis redis://127.0.0.1:6379/0 -overlimit-cache
//
// With -admin ADDR the demo also serves the operator's controls of
// package admin on a separate listener at ADDR, under /admin/ratekit/:
// see a client key's state, reset it, or grant it extra requests, in the
// limiters named as their limits, "demo" (GET /, the flag-built limit;
// absent with -config, whose rules are not exposed) and "login". Every
// request needs the header "Authorization: Bearer TOKEN", TOKEN being
// -admin-token or $RATEKIT_ADMIN_TOKEN; without either the demo makes a
// random token at start and prints it, once, to standard error with a curl
// line that uses it, but only for a loopback ADDR: the demo refuses to
// start with any other ADDR and no token. The key is the one the limit
// counts by: the client IP (an IPv6 client's /64, as 2001:db8:1:2::/64),
// or the header or query value of -key. Resets and grants are logged, with
// their reason, to standard error.
//
//	go run ./examples/demo -admin 127.0.0.1:9091 -admin-token s3cret
//	curl -H 'Authorization: Bearer s3cret' 'http://127.0.0.1:9091/admin/ratekit/state?limiter=demo&key=127.0.0.1'
//	curl -H 'Authorization: Bearer s3cret' -H 'Content-Type: application/json' \
//	    -d '{"limiter":"demo","key":"127.0.0.1","reason":"support ticket"}' http://127.0.0.1:9091/admin/ratekit/reset
//
// Once the listener is open, the demo prints "listening on ADDR" to
// standard output (after "demo: admin listening on URL" to standard
// error, with -admin). It shuts down gracefully on SIGINT and SIGTERM,
// with -store hybrid after a last sync that sends what it counted and
// gives back its unused leases. An invalid flag exits with status 2 and a
// message that names the valid values.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/client"
	"github.com/ratekit/ratekit/concurrency"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/overlimit"
	ratekitprom "github.com/ratekit/ratekit/prometheus"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/rulesredis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode("demo", err, os.Stderr))
}

// config is the parsed command line.
type config struct {
	addr       string
	framework  string // stdhttp, gin, echo, echo5, fiber, fiber3 or chi
	limit      core.Limit
	headers    answer.Style // of every middleware
	failClosed bool         // every limiter fails closed
	fail       string       // the -fail flag: open or closed
	key        string       // ip, header:NAME or query:NAME
	ipOptions  []keyfuncs.IPOption

	store       string // memory, redis or hybrid
	redis       redisTarget
	redisPrefix string

	syncInterval time.Duration             // -store hybrid: between syncs with Redis
	region       string                    // -store hybrid: this region's name; "" for one region
	peers        map[string]*redis.Options // with region: the Redis of every other region, by name
	overlimit    bool                      // wrap the shared store in an overlimit.Cache

	metrics bool // serve GET /metrics

	elastic         int // -elastic: the percent GET / may admit over its limit while there is room; 0 when off
	elasticInFlight int // -elastic-in-flight: the requests in flight from which there is none

	upstreamURL string // -upstream: the provider of GET /upstream; "" for the demo's own

	rulesFile  string    // -config FILE: the rules of GET / come from this file
	rulesRedis *rulesKey // -config redis://...: or from this Redis key

	admin          string // -admin: the address of the admin listener; "" when off
	adminToken     string // its bearer token; "" until made, if none was given
	adminTokenMade bool   // the demo generated adminToken
}

// rulesKey is a parsed -config redis://HOST:PORT/DB/KEY: the Redis key
// that holds the rules document, and its server.
type rulesKey struct {
	options *redis.Options
	key     string
}

// redisTarget is the parsed -redis flag: a URL for one server, or the
// addresses of cluster nodes.
type redisTarget struct {
	options *redis.Options // redis:// or rediss:// URL
	cluster []string       // host:port,host:port...
}

// Valid values of the flags that take names, for help and errors.
var (
	frameworks = []string{"stdhttp", "gin", "echo", "echo5", "fiber", "fiber3", "chi"}
	algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}
	keyForms   = "ip, header:NAME, query:NAME"
	stores     = []string{"memory", "redis", "hybrid"}
	failModes  = map[string]bool{"open": false, "closed": true}
)

// algorithmNames returns the names of the algorithms, for -algorithm.
func algorithmNames() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr      = fs.String("addr", "127.0.0.1:8080", "`address` to listen on (port 0 picks a free port)")
		framework = fs.String("framework", "stdhttp", "HTTP `framework` and its ratekit middleware (valid: "+strings.Join(frameworks, ", ")+")")
		algorithm = fs.String("algorithm", core.DefaultAlgorithm.String(),
			"rate-limiting `algorithm` (valid: "+algorithmNames()+")")
		limit    = fs.Int("limit", 10, "requests allowed per period")
		period   = fs.Duration("period", time.Minute, "length of the period")
		burst    = fs.Int("burst", 0, "bucket capacity, token-bucket and leaky-bucket only (default -limit)")
		shape    = fs.Bool("shape", false, "leaky-bucket only: delay requests to a steady rate instead of rejecting bursts")
		maxDelay = fs.Duration("max-delay", 0, "with -shape: reject requests that would wait longer (0: no bound but the queue)")
		key      = fs.String("key", "ip", "what a client is (valid: "+keyForms+")")
		proxies  = fs.String("trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For is trusted")
		v6prefix = fs.Int("ipv6-prefix", 64, "prefix length that identifies an IPv6 client (1 to 128)")
		fail     = fs.String("fail", "open", "when the store fails: `mode` open admits, closed rejects with 503")
		headers  = fs.String("headers", "x-ratelimit", "rate-limit header `style` (valid: x-ratelimit, ietf, both, none)")
		store    = fs.String("store", "memory", "where counters live (valid: "+strings.Join(stores, ", ")+")")
		rURL     = fs.String("redis", "redis://127.0.0.1:6379/0", "with -store redis or hybrid: a redis:// or rediss:// `URL`, or a comma-separated list of host:port of Redis Cluster nodes")
		rPrefix  = fs.String("redis-prefix", redisstore.DefaultPrefix, "with -store redis or hybrid: the `prefix` of every key")
		syncIvl  = fs.Duration("sync-interval", time.Second, "with -store hybrid: how often each server syncs its counts with Redis (and with the other regions, with -region)")
		region   = fs.String("region", "", "with -store hybrid: this server's region `name` (letters, digits, - and _), among several data centres each with its own Redis; needs -peer")
		olCache  = fs.Bool("overlimit-cache", false, "with -store redis or hybrid: answer clients over their limit from memory until their Retry-After passes, without asking Redis")
		peers    peerList
		metrics  = fs.Bool("metrics", false, "serve Prometheus metrics at GET /metrics (never limited)")
		adminAt  = fs.String("admin", "", "serve the operator's controls (package admin: state, reset, grant) under /admin/ratekit/ on a separate listener at `address`, for the limiters \"demo\" (the flag-built limit; not with -config, whose rules are not exposed) and \"login\"; on a loopback address without a token, a random token is made and printed at start")
		adminTok = fs.String("admin-token", "", "with -admin: the bearer `token` every admin request must carry (default $"+adminTokenEnv+"; required when -admin is not a loopback address)")
		elastic  = fs.Int("elastic", 0, "elastic throttling: the flag-built limit of GET / admits up to `percent`% more requests (1 to 1000; 0: off) while this server has fewer than -elastic-in-flight requests in flight")
		elasticN = fs.Int("elastic-in-flight", defaultElasticInFlight, "with -elastic: the requests in flight on this server, the one being decided included, from which it has no spare capacity and the limit is exact")
		upstream = fs.String("upstream", "", "the provider `URL` that GET /upstream calls, paced to 5 requests a second (default: a provider the demo serves itself on a loopback port, limited to 5 a second)")
		rulesCfg = fs.String("config", "", "`rules` that replace the flag-built limit, watched for changes: a YAML file (Envoy rate-limit schema), or redis://[user:password@]host:port/DB/KEY (or rediss://...) for the document a fleet shares under Redis key KEY, published with ratekit-rules")
	)
	fs.Var(&peers, "peer", "with -region: another region and its Redis, as `NAME=URL` (URL as in -redis, such as us=redis://10.2.0.5:6379/0); repeat the flag, or separate them with commas")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, cli.Reported(err)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("unexpected argument %q (the demo takes flags only)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if !slices.Contains(frameworks, *framework) {
		return nil, cli.Usagef("-framework: unknown framework %q (valid: %s)", *framework, strings.Join(frameworks, ", "))
	}
	cfg := &config{addr: *addr, framework: *framework, key: *key, metrics: *metrics}
	if *rulesCfg != "" {
		for _, f := range []string{"algorithm", "limit", "period", "burst", "shape", "max-delay", "key"} {
			if set[f] {
				return nil, cli.Usagef("-%s applies only without -config (the rules set the limits and keys)", f)
			}
		}
		if strings.HasPrefix(*rulesCfg, "redis://") || strings.HasPrefix(*rulesCfg, "rediss://") {
			rk, err := parseRulesKey(*rulesCfg)
			if err != nil {
				return nil, err
			}
			cfg.rulesRedis = rk
		} else {
			cfg.rulesFile = *rulesCfg
		}
	}
	algo, err := core.ParseAlgorithm(*algorithm)
	if err != nil {
		return nil, cli.Usagef("-algorithm: %w", err)
	}
	if *limit < 1 || *limit > core.MaxCount {
		return nil, cli.Usagef("-limit %d: must be a whole number from 1 to %d", *limit, core.MaxCount)
	}
	if *period <= 0 || *period > core.MaxPeriod {
		return nil, cli.Usagef("-period %s: must be a positive duration of at most %s, such as 1s, 10m or 1h", *period, core.MaxPeriod)
	}
	bucket := algo == core.TokenBucket || algo == core.LeakyBucket
	cfg.limit = core.Limit{Name: "demo", Algorithm: algo, Rate: core.Rate{Count: *limit, Period: *period}}
	if set["burst"] {
		if !bucket {
			return nil, cli.Usagef("-burst applies only to token-bucket and leaky-bucket, not %s", algo)
		}
		if *burst < 1 || *burst > core.MaxCount {
			return nil, cli.Usagef("-burst %d: must be a whole number from 1 to %d", *burst, core.MaxCount)
		}
		cfg.limit.Burst = *burst
	}
	if *shape && algo != core.LeakyBucket {
		return nil, cli.Usagef("-shape applies only to leaky-bucket, not %s", algo)
	}
	cfg.limit.Shaping = *shape
	if set["max-delay"] && !*shape {
		return nil, cli.Usagef("-max-delay applies only with -shape")
	}
	if *maxDelay < 0 {
		return nil, cli.Usagef("-max-delay %s: must not be negative", *maxDelay)
	}
	cfg.limit.MaxDelay = *maxDelay
	if _, err := cfg.limit.Params(time.Nanosecond); err != nil { // validates the limit
		return nil, cli.Usagef("%w", err)
	}
	if err := checkKey(*key); err != nil {
		return nil, err
	}
	if *proxies != "" {
		var cidrs []string
		for _, p := range strings.Split(*proxies, ",") {
			if p = strings.TrimSpace(p); p != "" {
				cidrs = append(cidrs, p)
			}
		}
		cfg.ipOptions = append(cfg.ipOptions, keyfuncs.TrustedProxies(cidrs...))
	}
	cfg.ipOptions = append(cfg.ipOptions, keyfuncs.IPv6Prefix(*v6prefix))
	if _, err := keyfuncs.NewClientIP(cfg.ipOptions...); err != nil {
		return nil, cli.Usagef("-trusted-proxies or -ipv6-prefix: %w", err)
	}
	mode, ok := failModes[*fail]
	if !ok {
		return nil, cli.Usagef("-fail: unknown fail mode %q (valid: open, closed)", *fail)
	}
	cfg.failClosed, cfg.fail = mode, *fail
	if cfg.headers, err = answer.ParseStyle(*headers); err != nil {
		return nil, cli.Usagef("-headers: %w", err)
	}
	sf := storeFlags{store: *store, url: *rURL, prefix: *rPrefix, syncInterval: *syncIvl,
		region: *region, peers: peers, overlimit: *olCache}
	if err := cfg.parseStore(sf, set); err != nil {
		return nil, err
	}
	if err := cfg.parseElastic(*elastic, *elasticN, set); err != nil {
		return nil, err
	}
	if err := cfg.parseUpstream(*upstream); err != nil {
		return nil, err
	}
	if err := cfg.parseAdmin(*adminAt, *adminTok, set, os.Getenv); err != nil {
		return nil, err
	}
	return cfg, nil
}

// storeFlags are the raw values of the flags that choose the store.
type storeFlags struct {
	store, url, prefix string
	syncInterval       time.Duration
	region             string
	peers              []string // -peer NAME=URL, one per other region
	overlimit          bool
}

// peerList is the -peer flag: repeatable, each value a comma-separated
// list of NAME=URL.
type peerList []string

func (p *peerList) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(*p, ",")
}

func (p *peerList) Set(v string) error {
	n := len(*p)
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*p = append(*p, part)
		}
	}
	if len(*p) == n {
		return errors.New("empty: want NAME=URL, such as us=redis://10.2.0.5:6379/0")
	}
	return nil
}

// parseStore validates -store, -redis, -redis-prefix, -sync-interval,
// -region, -peer and -overlimit-cache.
func (c *config) parseStore(f storeFlags, set map[string]bool) error {
	if !slices.Contains(stores, f.store) {
		return cli.Usagef("-store: unknown store %q (valid: %s)", f.store, strings.Join(stores, ", "))
	}
	if f.store != "hybrid" {
		for _, name := range []string{"sync-interval", "region", "peer"} {
			if set[name] {
				return cli.Usagef("-%s applies only with -store hybrid", name)
			}
		}
	}
	if f.store == "memory" {
		for _, name := range []string{"redis", "redis-prefix"} {
			if set[name] {
				return cli.Usagef("-%s applies only with -store redis or hybrid", name)
			}
		}
		if f.overlimit {
			return cli.Usagef("-overlimit-cache applies only with -store redis or hybrid: it saves a shared store the calls of clients over their limits, and the memory store has no calls to save")
		}
		c.store = f.store
		return nil
	}
	c.store, c.redisPrefix, c.overlimit = f.store, f.prefix, f.overlimit // the prefix is checked by redisstore, in sharedStore
	if f.store == "hybrid" {
		if f.syncInterval <= 0 {
			return cli.Usagef("-sync-interval %s: must be a positive duration, such as 500ms or 1s", f.syncInterval)
		}
		c.syncInterval = f.syncInterval
		if err := c.parseRegion(f.region, f.peers, set); err != nil {
			return err
		}
	}
	if strings.Contains(f.url, "://") {
		opts, err := redis.ParseURL(f.url)
		if err != nil {
			return cli.Usagef("-redis %q: %w (want redis://[user:password@]host:port/db, rediss://... or host:port,host:port for a cluster)", f.url, err)
		}
		c.redis.options = opts
		return nil
	}
	for _, addr := range strings.Split(f.url, ",") {
		addr = strings.TrimSpace(addr)
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return cli.Usagef("-redis %q: %q is not host:port (want redis://host:port/db, or host:port,host:port for a cluster)", f.url, addr)
		}
		c.redis.cluster = append(c.redis.cluster, addr)
	}
	return nil
}

// parseRegion validates -region and -peer, for -store hybrid. The names'
// characters are checked by redisstore.WithRegion, in sharedStore.
func (c *config) parseRegion(region string, peers []string, set map[string]bool) error {
	const want = "want NAME=URL, such as us=redis://10.2.0.5:6379/0, one for every other region"
	switch {
	case region == "" && set["region"]:
		return cli.Usagef("-region: the name must not be empty")
	case region == "" && len(peers) > 0:
		return cli.Usagef("-peer applies only with -region: name this server's region too")
	case region == "":
		return nil
	case len(peers) == 0:
		return cli.Usagef("-region %s: no other region; give each with -peer NAME=URL (a single region needs no -region)", region)
	}
	c.region, c.peers = region, map[string]*redis.Options{}
	for _, p := range peers {
		name, u, ok := strings.Cut(p, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return cli.Usagef("-peer %q: %s", p, want)
		}
		if name == region {
			return cli.Usagef("-peer %q: %s is this server's region (-region); -peer names the other regions", p, name)
		}
		if _, dup := c.peers[name]; dup {
			return cli.Usagef("-peer: region %s given twice", name)
		}
		opts, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			return cli.Usagef("-peer %q: %w (%s; URL as in -redis: redis://[user:password@]host:port/db or rediss://...)", p, err, want)
		}
		c.peers[name] = opts
	}
	return nil
}

// parseRulesKey parses -config redis://HOST:PORT/DB/KEY.
func parseRulesKey(s string) (*rulesKey, error) {
	const want = "want redis://[user:password@]host:port/DB/KEY or rediss://..., such as redis://127.0.0.1:6379/0/ratekit:rules:demo"
	u, err := url.Parse(s)
	if err != nil {
		return nil, cli.Usagef("-config: %w (%s)", err, want)
	}
	db, key, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if key == "" {
		return nil, cli.Usagef("-config %q: no Redis key after the database number (%s)", s, want)
	}
	server := *u
	server.Path, server.RawPath = "/"+db, ""
	opts, err := redis.ParseURL(server.String())
	if err != nil {
		return nil, cli.Usagef("-config %q: %w (%s)", s, err, want)
	}
	return &rulesKey{options: opts, key: key}, nil
}

// client returns a client of the rules' Redis, with the settings of
// redisClient.
func (k *rulesKey) client() redis.UniversalClient {
	return newClient(k.options)
}

// newClient returns a client of the one server of o, with the settings of
// redisClient.
func newClient(o *redis.Options) *redis.Client {
	opts := *o
	opts.ContextTimeoutEnabled = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&opts)
}

// redisClient returns a client for the -redis target. It applies context
// deadlines to reads and writes, as redisstore recommends, and does not
// ask for maintenance notifications (a managed-Redis feature whose
// background goroutine outlives Close in go-redis 9.22).
func (c *config) redisClient() redis.UniversalClient {
	noMaint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if c.redis.cluster != nil {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.redis.cluster,
			ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaint})
	}
	return newClient(c.redis.options)
}

// peerClients returns a client of every other region's Redis, by region
// name (-peer); none without -region.
func (c *config) peerClients() map[string]redis.UniversalClient {
	if len(c.peers) == 0 {
		return nil
	}
	clients := make(map[string]redis.UniversalClient, len(c.peers))
	for name, o := range c.peers {
		clients[name] = newClient(o)
	}
	return clients
}

// sharedStore returns the store that both limiters share with -store
// redis or hybrid, wrapped in an overlimit.Cache with -overlimit-cache;
// nil in memory. clock, if not nil, is the clock of the store (for
// tests). rdb is the client of -redis, peers those of -peer. stop stops
// the hybrid store's syncs, after a last one; it is never nil.
func (c *config) sharedStore(clock func() time.Time, rdb redis.UniversalClient, peers map[string]redis.UniversalClient) (s core.Store, stop func(), err error) {
	stop = func() {}
	if rdb == nil {
		return nil, stop, nil
	}
	opts := []redisstore.Option{redisstore.WithPrefix(c.redisPrefix)}
	if clock != nil {
		opts = append(opts, redisstore.WithClock(clock))
	}
	if c.store == "hybrid" {
		if c.region != "" {
			opts = append(opts, redisstore.WithRegion(c.region, peers))
		}
		h, err := redisstore.NewHybrid(rdb, c.syncInterval, opts...)
		if err != nil {
			return nil, stop, cli.Usagef("-store hybrid (-redis-prefix, -region, -peer): %w", err)
		}
		s, stop = h, func() { _ = h.Close() }
	} else {
		rs, err := redisstore.New(rdb, opts...)
		if err != nil {
			return nil, stop, cli.Usagef("-redis-prefix: %w", err)
		}
		s = rs
	}
	if c.overlimit {
		var oo []overlimit.Option
		if clock != nil {
			oo = append(oo, overlimit.WithClock(clock))
		}
		cache, err := overlimit.New(s, oo...)
		if err != nil {
			stop()
			return nil, func() {}, err
		}
		s = cache
	}
	return s, stop, nil
}

// checkKey validates the -key flag.
func checkKey(key string) error {
	kind, name, found := strings.Cut(key, ":")
	switch {
	case key == "ip":
		return nil
	case found && (kind == "header" || kind == "query"):
		if name == "" {
			return cli.Usagef("-key %q: %s name missing (valid: %s)", key, kind, keyForms)
		}
		if kind == "header" && !isToken(name) {
			return cli.Usagef("-key %q: %q is not a valid header name", key, name)
		}
		return nil
	}
	return cli.Usagef("-key %q: unknown key (valid: %s)", key, keyForms)
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names
// are.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// pickKey returns the key the -key flag names, made with the
// constructors of one framework's middleware: ip for "ip", header for
// "header:NAME", query for "query:NAME".
func pickKey[K any](spec string, ip K, header, query func(name string) K) K {
	kind, name, _ := strings.Cut(spec, ":")
	switch kind {
	case "header":
		return header(name)
	case "query":
		return query(name)
	}
	return ip
}

// loginLimit is the strict limit of POST /login.
var loginLimit = core.Limit{Name: "login", Algorithm: core.FixedWindow, Rate: core.PerMinute(5)}

// routes is what every framework serves, built once from the flags: the
// limiter of GET / (and of every other request), that of POST /login, and
// what the keys are made of.
type routes struct {
	main, login *core.Limiter
	rules       *rules.Engine        // with -config: decides GET / (main is then nil) and also POST /login
	key         string               // the -key flag
	ipOptions   []keyfuncs.IPOption  // of the client-IP key
	headers     answer.Style         // the -headers flag, an option of every middleware
	metrics     http.Handler         // GET /metrics; nil without -metrics
	inFlight    *concurrency.Limiter // with -elastic: counts the requests in flight on every route (elastic.go)
	orders      *orders              // POST /orders (orders.go)
	reports     *reports             // POST /reports (reports.go)
	upstream    *upstream            // GET /upstream (upstream.go)
}

// routes builds the limiters and the metrics handler. clock, if not nil,
// is the clock of the stores (for tests). shared is the store of -store
// redis or hybrid (sharedStore), nil in memory. log is the limiters'
// logger: of store failures, and of the resets and grants of -admin.
func (c *config) routes(clock func() time.Time, shared core.Store, log *slog.Logger) (*routes, error) {
	// In memory, each limiter gets its own store. In Redis the two limits
	// share one store and are kept apart by their names, "demo" and
	// "login"; every demo server on the same Redis shares them.
	limits := []core.Limit{c.limit, loginLimit}
	stores := []core.Store{shared, shared}
	withRules := c.rulesFile != "" || c.rulesRedis != nil
	promOpts := []ratekitprom.Option{ratekitprom.WithStore(c.store)}
	for i := range stores {
		if shared == nil {
			s := &core.MemoryStore{Clock: clock}
			stores[i] = s
			if i > 0 || !withRules { // the rules' limits are tracked by TrackRules
				promOpts = append(promOpts, ratekitprom.WithMemoryStore(s, limits[i]))
			}
		}
	}
	var metrics *ratekitprom.Metrics
	limOpts := []core.Option{core.WithLogger(log)}
	if c.failClosed {
		limOpts = append(limOpts, core.WithFailClosed())
	}
	if c.metrics {
		var err error
		if metrics, err = ratekitprom.New(promOpts...); err != nil {
			return nil, err
		}
		limOpts = append(limOpts, core.WithObserver(metrics.Observe))
	}
	loginLim, err := core.NewLimiter(loginLimit, append([]core.Option{core.WithStore(stores[1])}, limOpts...)...)
	if err != nil {
		return nil, err
	}
	rt := &routes{login: loginLim, key: c.key, ipOptions: c.ipOptions, headers: c.headers}
	if withRules {
		// The rules' limits live in the store of GET /: in Redis, shared
		// by every demo server on it, under names of their own.
		ip, err := keyfuncs.NewClientIP(c.ipOptions...)
		if err != nil {
			return nil, err
		}
		rt.rules, err = rules.NewEngine(rules.WithStore(stores[0]), rules.WithClientIP(ip), rules.WithLimiterOptions(limOpts...))
		if err != nil {
			return nil, err
		}
		if metrics != nil {
			if err := metrics.TrackRules(rt.rules); err != nil {
				return nil, err
			}
		}
	} else {
		opts := append([]core.Option{core.WithStore(stores[0])}, limOpts...)
		if c.elastic > 0 {
			if rt.inFlight, err = inFlightLimiter(log); err != nil {
				return nil, err
			}
			opts = append(opts, core.WithElastic(c.elastic, rt.inFlight.Spare(c.elasticInFlight)))
		}
		if rt.main, err = core.NewLimiter(c.limit, opts...); err != nil {
			if c.store == "hybrid" && errors.Is(err, core.ErrInvalidLimit) {
				// The limit is valid (parseFlags checked it): the hybrid
				// store refuses its algorithm.
				return nil, cli.Usagef("-algorithm %s with -store hybrid: %w", c.limit.Algorithm, err)
			}
			return nil, err
		}
	}
	if metrics != nil {
		reg := prometheus.NewRegistry()
		if err := reg.Register(metrics); err != nil {
			return nil, err
		}
		rt.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	return rt, nil
}

// run parses args, serves until ctx is done, and shuts the server down.
// It prints "listening on ADDR" to stdout once the listener is open.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return serve(ctx, args, stdout, stderr, fakes{})
}

// fakes stand in for the passing of time in tests; the zero value is the
// real thing.
type fakes struct {
	// clock is read by the stores, the memory queue and the limiter of
	// the demo's provider; nil is the system clock.
	clock func() time.Time
	// sleep is the clock that GET /upstream's client waits on, and
	// measures its waits with; nil is the system clock.
	sleep client.Clock
	// work is the work of a report (POST /reports): nil waits d, or
	// until ctx ends.
	work func(ctx context.Context, d time.Duration) error
}

// shutdownTimeout bounds how long requests in flight may take to finish
// after a signal.
const shutdownTimeout = 10 * time.Second

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, f fakes) error {
	clock := f.clock
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var rdb redis.UniversalClient
	if cfg.store != "memory" {
		rdb = cfg.redisClient()
		defer rdb.Close()
	}
	peers := cfg.peerClients() // -region: the other regions' Redis
	defer func() {
		for _, p := range peers {
			_ = p.Close()
		}
	}()
	// Deferred after the clients' Close, stop runs before it: the hybrid
	// store's last sync sends what this server counted, to this region's
	// Redis and to the others'. It runs once the server has shut down.
	shared, stopStore, err := cfg.sharedStore(clock, rdb, peers)
	if err != nil {
		return err
	}
	defer stopStore()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	rt, err := cfg.routes(clock, shared, log)
	if err != nil {
		return err
	}
	if rt.orders, err = cfg.orders(clock, shared, rdb, log); err != nil {
		return err
	}
	// The worker stops before the Redis client closes (defers run last
	// first); the order it was placing is delivered again.
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := rt.orders.run(wctx)
	defer func() { stopWorker(); <-workerDone }()
	exact, err := cfg.exactStore(clock, shared, rdb)
	if err != nil {
		return err
	}
	if rt.reports, err = cfg.reports(clock, shared, exact, f.work, log); err != nil {
		return err
	}
	// The demo's provider, without -upstream, stops after the server
	// (defers run last first), once no request of GET /upstream is left.
	if rt.upstream, err = cfg.upstream(ctx, clock, f.sleep, exact, log); err != nil {
		return err
	}
	defer rt.upstream.close()
	if rt.rules != nil {
		if k := cfg.rulesRedis; k != nil {
			rrdb := k.client()
			defer rrdb.Close()
			w, err := rulesredis.Watch(rt.rules, rrdb, k.key, rulesredis.WithLogger(log))
			if errors.Is(err, rulesredis.ErrNotFound) {
				return fmt.Errorf("%w (publish the rules first: go run github.com/ratekit/ratekit/rulesredis/cmd/ratekit-rules -redis redis://HOST:PORT/DB -key KEY FILE)", err)
			}
			if err != nil {
				return err // the document is invalid (its errors say where), or Redis is down
			}
			defer w.Close()
		} else {
			w, err := rulesfile.Watch(rt.rules, cfg.rulesFile, rulesfile.WithLogger(log))
			if err != nil {
				return err // the file is missing or invalid: its errors say where
			}
			defer w.Close()
		}
	}
	srv, err := rt.server(cfg.framework)
	if err != nil {
		return err
	}
	if rdb != nil {
		// Not fatal: the limiter fails open (or closed, with -fail closed)
		// until Redis answers, and recovers by itself.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := rdb.Ping(pctx).Err(); err != nil {
			if cfg.store == "hybrid" {
				fmt.Fprintf(stderr, "demo: warning: Redis does not answer (%v); each server decides within its share of the limit until it does\n", err)
			} else {
				fmt.Fprintf(stderr, "demo: warning: Redis does not answer (%v); requests are decided by -fail %s until it does\n", err, cfg.fail)
			}
		}
		cancel()
	}
	for name, p := range peers {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := p.Ping(pctx).Err(); err != nil {
			fmt.Fprintf(stderr, "demo: warning: the Redis of region %s does not answer (%v); this region decides on the counts it has until it does\n", name, err)
		}
		cancel()
	}
	adm, err := listenAdmin(ctx, cfg, rt, log) // nil without -admin
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.addr)
	if err != nil {
		adm.stop()
		return err
	}
	defer ln.Close() // closing it again after the server did is harmless
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	err = adm.serve(cfg, stderr)
	if err == nil {
		_, err = fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	}
	if err != nil {
		_ = srv.Close()
		_ = ln.Close()
		<-served
		adm.stop()
		return err
	}

	select {
	case err := <-served: // the listener failed
		adm.stop()
		return err
	case <-adm.done(): // the admin listener failed
		_ = srv.Close()
		_ = ln.Close()
		<-served
		return adm.failure()
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	// Fiber's Shutdown does nothing if it comes before Listener has taken
	// the listener; closing the listener after Shutdown ends Listener then.
	_ = ln.Close()
	<-served // http.ErrServerClosed, or nil from Fiber
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("shutdown: %w", err)
	}
	return errors.Join(err, adm.shutdown(sctx))
}
