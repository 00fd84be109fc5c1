// Command ratekit holds ratekit's tools: serve runs Envoy's rate limit
// service, and replay replays access logs through rate limits to choose
// them.
//
// # serve
//
// ratekit serve answers Envoy's rate limit filter
// (envoy.service.ratelimit.v3.RateLimitService, package rls) from the
// configuration files of the Envoy rate limit service (envoyproxy/ratelimit),
// or from rules held in Redis (package rulesredis), reloaded while it runs:
//
//	ratekit serve -config /etc/ratelimit/config            # a directory: one domain per *.yaml
//	ratekit serve -config config.yaml -store redis -redis 10.0.0.5:6379
//
// It serves gRPC (-grpc, default :8081: the rate limit service, gRPC health
// and server reflection) and HTTP (-http, default :8080: GET /healthcheck,
// GET /metrics for Prometheus, POST /json). Every flag has an environment
// variable (RATEKIT_*; a flag given beats it); the Redis password is read
// from RATEKIT_REDIS_PASSWORD only. When it is ready it logs
// "ratekit serve: listening grpc=ADDR http=ADDR" on standard error; on
// SIGINT or SIGTERM it stops gracefully. docs/serve.md is its manual.
//
// # replay
//
// replay replays access logs through rate limits to choose them from real
// traffic before enforcing them (package replay):
//
//	go run ./cmd/ratekit replay -algorithm all -limit 100 -period 1m access.log
//	go run ./cmd/ratekit replay -config rules.yaml -json access.log.gz
//	zcat access.log.gz | go run ./cmd/ratekit replay -html report.html -
//
// FILE "-" is standard input; gzip-compressed input is read
// transparently. A line whose time jumps more than -max-jump (default:
// the longest period, at least an hour) ahead of the latest time seen,
// unless -jump-lines lines in a row (default 5) confirm the jump, is an
// outlier: counted as a bad line, "time jump", and not replayed. At most
// -max-clients distinct clients (default 1,000,000) are tracked; the
// requests of clients first seen after that are counted and not
// replayed, and the report says so. The log is in the nginx/Apache common or combined
// format (-format combined, the default) or JSON lines (-format json,
// members named by -json-time, -json-client, ..., and -header
// NAME=MEMBER for request headers).
//
// The limits are a rules file (-config FILE, the YAML the middleware
// loads) or flags like the demo's: -algorithm (or "all", the five side by
// side), -limit, -period, -burst, -key ip|header:NAME|user,
// -trusted-proxies. The report goes to standard output, as text or, with
// -json, as one JSON object; -html FILE also writes it as a
// self-contained HTML page with charts. With -target-reject SHARE (such
// as 0.1% or 0.001) it suggests per algorithm the smallest limit that
// would have rejected at most that share of the requests, and with
// -target-limited SHARE (such as 1%) the smallest that would have limited
// at most that share of the clients, each verified by replaying it: the
// log is read again for each round of candidates (standard input is kept
// in a temporary file for that), so a suggestion takes several times as
// long as the report. A target counts every client, an abuser too: when
// one client sends half the requests, a limit that refused it would
// reject up to half of them, so the target stays near its peak. With
// -headroom FACTOR (such as 1.5) it suggests per algorithm the busiest
// normal client's peak times FACTOR, rounded up, and replays it; a
// client whose peak is above -outlier-factor (default 10) times the
// median client's peak is an outlier, left out. Every suggestion says
// what it would have refused the busiest outliers.
//
// -synthetic replays, instead of files, a generated trace (2000 clients
// at a limit of 100 per minute for 30 minutes, from -seed) to measure the
// sliding window counter against the exact log:
//
//	go run ./cmd/ratekit replay -synthetic -algorithm sliding-window-counter -limit 100 -period 1m
//
// A bad flag or subcommand exits with status 2 and a message naming the
// valid values; an input that cannot be read, or a broken rules file,
// with status 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
	"github.com/ratekit/ratekit/replay"
	"github.com/ratekit/ratekit/rulesfile"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one ends the program at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode("ratekit", err, os.Stderr))
}

const usage = `usage: ratekit serve [flags]
       ratekit replay [flags] FILE...

subcommands:
  serve    run Envoy's rate limit service on ratekit (ratekit serve -h)
  replay   replay access logs through rate limits and report (ratekit replay -h)
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usagef("no subcommand (valid: replay, serve)")
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stderr)
	case "replay":
		return runReplay(ctx, args[1:], stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	fmt.Fprint(stderr, usage)
	fmt.Fprintf(stderr, "ratekit: unknown subcommand %q (valid: replay, serve)\n", args[0])
	return cli.Reported(fmt.Errorf("unknown subcommand %q (valid: replay, serve)", args[0]))
}

var algorithms = []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter}

func algorithmNames() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// headerList is -header NAME=MEMBER, repeatable.
type headerList map[string]string

func (h headerList) String() string { return "" }

func (h headerList) Set(v string) error {
	name, member, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(member) == "" {
		return errors.New("want NAME=MEMBER, such as X-Forwarded-For=http_x_forwarded_for")
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(member)
	return nil
}

// shareFlag is a share written as "0.1%" or "0.001".
type shareFlag float64

func (s *shareFlag) String() string {
	if s == nil || *s == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(*s)*100, 'g', -1, 64) + "%"
}

func (s *shareFlag) Set(v string) error {
	f, err := parseShare(v)
	if err != nil {
		return err
	}
	*s = shareFlag(f)
	return nil
}

// parseShare reads "0.1%" as 0.001 and "0.001" as itself; 0 turns the
// target off.
func parseShare(v string) (float64, error) {
	t := strings.TrimSpace(v)
	div := 1.0
	if strings.HasSuffix(t, "%") {
		t, div = strings.TrimSpace(strings.TrimSuffix(t, "%")), 100
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f/div >= 1 || f != f {
		return 0, fmt.Errorf("%q is not a share: want a percentage below 100%% such as 0.1%%, or a fraction below 1 such as 0.001", v)
	}
	return f / div, nil
}

func runReplay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratekit replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekit replay [flags] FILE...   (FILE - is standard input; .gz is read transparently)")
		fs.PrintDefaults()
	}
	var (
		format    = fs.String("format", "combined", "log `format` (valid: combined, common, json)")
		maxLine   = fs.Int("max-line", replay.DefaultMaxLineBytes, "longest line in `bytes`, at most 1 MiB (1048576); longer lines are counted as bad and skipped")
		maxJump   = fs.Duration("max-jump", 0, "how far ahead of the latest time seen a line may jump unless the lines after it confirm it (-jump-lines); such an outlier is counted as a bad line, \"time jump\" (default: the longest period, at least 1h)")
		jumpLines = fs.Int("jump-lines", replay.DefaultJumpLines, "how many `lines` in a row, each within -max-jump of the one before, must agree to move the clock past -max-jump (2 to 64); fewer are bad lines, \"time jump\"")
		maxClient = fs.Int("max-clients", replay.DefaultMaxClients, "the most distinct `clients` tracked (about 300 B each per limit); the requests of clients first seen after the cap is reached are counted, not replayed, and the report says where")
		jTime     = fs.String("json-time", "time", "with -format json: the `member` holding the time (RFC 3339, common log format, or Unix seconds)")
		jClient   = fs.String("json-client", "remote_addr", "with -format json: the `member` holding the client address")
		jMethod   = fs.String("json-method", "method", "with -format json: the `member` holding the method")
		jPath     = fs.String("json-path", "path", "with -format json: the `member` holding the request URI")
		jStatus   = fs.String("json-status", "status", "with -format json: the `member` holding the status")
		jUser     = fs.String("json-user", "user", "with -format json: the `member` holding the user")
		headers   = headerList{}
		rulesPath = fs.String("config", "", "a rules `file` (the YAML the middleware loads) that decides instead of the flag-built limit")
		algorithm = fs.String("algorithm", core.DefaultAlgorithm.String(), "rate-limiting `algorithm` (valid: "+algorithmNames()+", or all: the five side by side)")
		limit     = fs.Int("limit", 10, "requests allowed per period")
		period    = fs.Duration("period", time.Minute, "length of the period")
		burst     = fs.Int("burst", 0, "bucket capacity, token-bucket and leaky-bucket only (default -limit)")
		key       = fs.String("key", "ip", "what a client is (valid: ip, header:NAME, user)")
		proxies   = fs.String("trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For is trusted (a -header member of JSON lines)")
		asJSON    = fs.Bool("json", false, "print the report as one JSON object")
		htmlPath  = fs.String("html", "", "also write the report as a self-contained HTML `file`")
		showKeys  = fs.Bool("show-keys", false, "show client keys in the report instead of their hashes")
		top       = fs.Int("top", 10, "how many of the most limited clients to list per limit")
		tReject   shareFlag
		tLimited  shareFlag
		headroom  = fs.Float64("headroom", 0, "suggest per algorithm the busiest normal client's peak times this `factor`, rounded up, such as 1.5 (50% over it); the outliers (-outlier-factor) are left out, and the report says what the limit refuses them (0: none)")
		outliers  = fs.Float64("outlier-factor", replay.DefaultOutlierFactor, "with suggestions: a client whose peak is above this `factor` times the median client's peak is an outlier, not a normal client")
		synthetic = fs.Bool("synthetic", false, "replay a generated trace (2000 clients, 30 minutes) instead of files")
		seed      = fs.Uint64("seed", 1, "with -synthetic: the trace's seed")
	)
	fs.Var(headers, "header", "with -format json: a request header and the `NAME=MEMBER` holding it, such as X-Forwarded-For=http_x_forwarded_for (repeatable)")
	fs.Var(&tReject, "target-reject", "suggest per algorithm the smallest limit that rejects at most this `share` of requests, such as 0.1% or 0.001 (0: none)")
	fs.Var(&tLimited, "target-limited", "suggest per algorithm the smallest limit that limits at most this `share` of clients, such as 1% or 0.01 (0: none)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Reported(err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	o := replay.Options{
		Format: *format, MaxLineBytes: *maxLine, MaxJump: *maxJump, JumpLines: *jumpLines, MaxClients: *maxClient, ShowKeys: *showKeys, Top: *top,
		TargetReject: float64(tReject), TargetLimited: float64(tLimited), Key: *key,
		Headroom: *headroom, OutlierFactor: *outliers,
	}
	switch *format {
	case "combined", "common":
		for _, f := range []string{"json-time", "json-client", "json-method", "json-path", "json-status", "json-user", "header"} {
			if set[f] {
				return cli.Usagef("-%s applies only with -format json", f)
			}
		}
	case "json":
		o.Fields = replay.Fields{Time: *jTime, Client: *jClient, Method: *jMethod, Path: *jPath, Status: *jStatus, User: *jUser, Headers: headers}
	default:
		return cli.Usagef("-format: unknown format %q (valid: combined, common, json)", *format)
	}
	if *maxLine < 16 || *maxLine > replay.MaxLineBytesLimit {
		return cli.Usagef("-max-line %d: must be from 16 to %d (1 MiB)", *maxLine, replay.MaxLineBytesLimit)
	}
	if *maxJump < 0 {
		return cli.Usagef("-max-jump %s: must not be negative (0: the default)", *maxJump)
	}
	if *jumpLines < 2 || *jumpLines > replay.MaxJumpLines {
		return cli.Usagef("-jump-lines %d: must be from 2 to %d", *jumpLines, replay.MaxJumpLines)
	}
	if *maxClient < 1 {
		return cli.Usagef("-max-clients %d: must be at least 1", *maxClient)
	}
	if *top < 0 {
		return cli.Usagef("-top %d: must not be negative", *top)
	}
	if *headroom != 0 && !(*headroom >= 1 && *headroom <= replay.MaxHeadroom) {
		return cli.Usagef("-headroom %g: must be from 1 to %d, such as 1.5 for 50%% over the busiest normal client (0: none)", *headroom, replay.MaxHeadroom)
	}
	if !(*outliers >= 1 && !math.IsInf(*outliers, 1)) {
		return cli.Usagef("-outlier-factor %g: must be at least 1, such as 10", *outliers)
	}
	if set["outlier-factor"] && tReject == 0 && tLimited == 0 && *headroom == 0 {
		return cli.Usagef("-outlier-factor applies only with -headroom, -target-reject or -target-limited")
	}
	if *proxies != "" {
		for _, p := range strings.Split(*proxies, ",") {
			if p = strings.TrimSpace(p); p != "" {
				o.TrustedProxies = append(o.TrustedProxies, p)
			}
		}
	}
	if err := checkKey(*key); err != nil {
		return err
	}
	if *rulesPath != "" {
		for _, f := range []string{"algorithm", "limit", "period", "burst", "key", "target-reject", "target-limited", "headroom", "outlier-factor", "synthetic"} {
			if set[f] {
				return cli.Usagef("-%s applies only without -config (the rules set the limits and keys)", f)
			}
		}
		data, err := readRules(*rulesPath)
		if err != nil {
			return fmt.Errorf("-config: %w", err)
		}
		cfg, err := rulesfile.Parse(*rulesPath, data)
		if err != nil {
			return err
		}
		o.Rules = &cfg
		o.TargetReject, o.TargetLimited, o.Headroom, o.OutlierFactor, o.Key = 0, 0, 0, 0, ""
	} else {
		lims, err := flagLimits(*algorithm, *limit, *period, *burst, set["burst"])
		if err != nil {
			return err
		}
		o.Limits = lims
	}

	var inputs []replay.Input
	if *synthetic {
		if fs.NArg() > 0 {
			return cli.Usagef("-synthetic replays a generated trace: no FILE (got %q)", fs.Arg(0))
		}
		for _, f := range []string{"format", "json-time", "json-client", "json-method", "json-path", "json-status", "json-user", "header", "key"} {
			if set[f] {
				return cli.Usagef("-%s does not apply with -synthetic, whose trace is JSON keyed by IP", f)
			}
		}
		o.Format, o.Fields = "json", replay.Fields{}
		inputs = []replay.Input{replay.Synthetic(*seed)}
	} else {
		if fs.NArg() == 0 {
			return cli.Usagef("no FILE to replay (give log files, or - for standard input)")
		}
		var cleanup func()
		var err error
		again := o.TargetReject > 0 || o.TargetLimited > 0 || o.Headroom > 0 // suggestions read the log again
		inputs, cleanup, err = openInputs(fs.Args(), stdin, again)
		if cleanup != nil {
			defer cleanup()
		}
		if err != nil {
			return err
		}
	}
	if set["seed"] && !*synthetic {
		return cli.Usagef("-seed applies only with -synthetic")
	}

	rep, err := replay.Run(ctx, o, inputs...)
	if err != nil {
		return err
	}
	if *htmlPath != "" {
		f, err := os.Create(*htmlPath)
		if err != nil {
			return fmt.Errorf("-html: %w", err)
		}
		err = rep.WriteHTML(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("-html: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(stdout)
}

// checkKey validates -key.
func checkKey(key string) error {
	kind, name, found := strings.Cut(key, ":")
	switch {
	case key == "ip" || key == "user":
		return nil
	case found && kind == "header" && name != "":
		return nil
	}
	return cli.Usagef("-key %q: unknown key (valid: ip, header:NAME, user)", key)
}

// flagLimits builds the limits of -algorithm, -limit, -period and -burst.
func flagLimits(algorithm string, limit int, period time.Duration, burst int, burstSet bool) ([]core.Limit, error) {
	algos := algorithms
	if algorithm != "all" {
		a, err := core.ParseAlgorithm(algorithm)
		if err != nil {
			return nil, cli.Usagef("-algorithm: %w, or all", err)
		}
		algos = []core.Algorithm{a}
	}
	if limit < 1 || limit > core.MaxCount {
		return nil, cli.Usagef("-limit %d: must be a whole number from 1 to %d", limit, core.MaxCount)
	}
	if period <= 0 || period > core.MaxPeriod {
		return nil, cli.Usagef("-period %s: must be a positive duration of at most %s, such as 1s, 10m or 1h", period, core.MaxPeriod)
	}
	if burstSet && (burst < 1 || burst > core.MaxCount) {
		return nil, cli.Usagef("-burst %d: must be a whole number from 1 to %d", burst, core.MaxCount)
	}
	var lims []core.Limit
	for _, a := range algos {
		l := core.Limit{Name: "replay", Algorithm: a, Rate: core.Rate{Count: limit, Period: period}}
		if burstSet {
			if a != core.TokenBucket && a != core.LeakyBucket {
				if algorithm != "all" {
					return nil, cli.Usagef("-burst applies only to token-bucket and leaky-bucket, not %s", a)
				}
			} else {
				l.Burst = burst
			}
		}
		if _, err := l.Params(time.Nanosecond); err != nil {
			return nil, cli.Usagef("%w", err)
		}
		lims = append(lims, l)
	}
	return lims, nil
}

// openInputs makes the inputs of the FILE arguments. Standard input is
// read as it comes, or, when the log is read again (again: for
// suggestions), copied to a temporary file first, which cleanup removes.
func openInputs(names []string, stdin io.Reader, again bool) ([]replay.Input, func(), error) {
	stdinUsed := false
	var inputs []replay.Input
	var cleanup func()
	for _, name := range names {
		path := name
		if name == "-" {
			if stdinUsed {
				return nil, cleanup, cli.Usagef("standard input (-) given twice")
			}
			stdinUsed = true
			if !again {
				inputs = append(inputs, replay.Input{Name: name, Open: func() (io.ReadCloser, error) { return io.NopCloser(stdin), nil }})
				continue
			}
			f, err := os.CreateTemp("", "ratekit-replay-*.log")
			if err != nil {
				return nil, nil, err
			}
			cleanup = func() { os.Remove(f.Name()) }
			_, err = io.Copy(f, stdin)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, cleanup, fmt.Errorf("standard input: %w", err)
			}
			path = f.Name()
		} else {
			st, err := os.Stat(name)
			if err != nil {
				return nil, cleanup, err
			}
			if st.IsDir() {
				return nil, cleanup, fmt.Errorf("%s is a directory", name)
			}
		}
		inputs = append(inputs, replay.Input{Name: name, Open: func() (io.ReadCloser, error) { return os.Open(path) }})
	}
	return inputs, cleanup, nil
}

// readRules reads a rules file, refusing one over rulesfile.MaxSize bytes
// after reading no more than that, as the middleware's loaders do.
func readRules(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, rulesfile.MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > rulesfile.MaxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it the rules file?", path, rulesfile.MaxSize)
	}
	return data, nil
}
