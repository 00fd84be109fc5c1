package demo

import (
	"errors"
	"flag"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/keyfuncs"
	"github.com/ratekit/ratekit/overlimit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/hybrid"
)

// config is the parsed command line.
type config struct {
	addr       string
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

// parseFlags parses the command line of the program p.
func parseFlags(p Program, args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	metricsUsage := "serve Prometheus metrics at GET /metrics (never limited)"
	if p.Metrics == nil {
		metricsUsage = "not in this program, which leaves the Prometheus client out to build fast: run " + metricsProgram + " instead"
	}
	var (
		addr      = fs.String("addr", "127.0.0.1:8080", "`address` to listen on (port 0 picks a free port)")
		framework = fs.String("framework", p.Framework, "HTTP `framework` and its ratekit middleware: this program serves "+p.Framework+" only; each framework has a program of its own, go run ./examples/demo/NAME (stdhttp: go run ./examples/demo) (valid: "+frameworkNames()+")")
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
		metrics  = fs.Bool("metrics", p.MetricsByDefault, metricsUsage)
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

	if err := checkFramework(p, *framework); err != nil {
		return nil, err
	}
	if *metrics && p.Metrics == nil {
		return nil, cli.Usagef("-metrics: this program leaves the Prometheus client out, to build fast; for GET /metrics run %s (the same demo and flags), or a framework's program", metricsProgram)
	}
	cfg := &config{addr: *addr, key: *key, metrics: *metrics}
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
	if _, err := keyfuncs.IP(cfg.ipOptions...); err != nil { // validates the options
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
// characters are checked by hybrid.WithRegion, in sharedStore.
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
	if c.store == "hybrid" {
		opts := []hybrid.Option{hybrid.WithPrefix(c.redisPrefix)}
		if clock != nil {
			opts = append(opts, hybrid.WithClock(clock))
		}
		if c.region != "" {
			opts = append(opts, hybrid.WithRegion(c.region, peers))
		}
		h, err := hybrid.New(rdb, c.syncInterval, opts...)
		if err != nil {
			return nil, stop, cli.Usagef("-store hybrid (-redis-prefix, -region, -peer): %w", err)
		}
		s, stop = h, func() { _ = h.Close() }
	} else {
		opts := []redisstore.Option{redisstore.WithPrefix(c.redisPrefix)}
		if clock != nil {
			opts = append(opts, redisstore.WithClock(clock))
		}
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
