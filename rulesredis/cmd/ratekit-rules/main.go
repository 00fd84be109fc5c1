// Command ratekit-rules publishes a rate-limit rules file to Redis, where
// the rulesredis watchers of every server load it, after checking it as
// the servers will:
//
//	go run github.com/ratekit/ratekit/rulesredis/cmd/ratekit-rules \
//		-redis redis://127.0.0.1:6379/0 -key ratekit:rules:api -keys plan,tier rules.yaml
//
// The file (or standard input, for "-") must be a rules document of at
// most 4 MiB that rulesfile.Parse accepts and that a rules.Engine with the
// application's descriptor keys loads: -keys names the keys the
// application registers with rules.WithKey, and "user" if it sets
// rules.WithUserKey; the built-in keys (remote_address, header:NAME, ...)
// need no mention. Each problem is printed as "FILE:LINE: path: message".
// A valid file is stored under -key and announced on the key's channel
// (rulesredis.Publish); with -dry-run it is only checked.
//
// -redis takes a redis:// or rediss:// URL (redis://[user:password@]host:port/db)
// or a comma-separated list of host:port of Redis Cluster nodes.
//
// The exit status is 0 when the file was published (or, with -dry-run,
// is valid), 1 when it was refused or Redis failed, and 2 for bad
// arguments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
	"github.com/ratekit/ratekit/rulesredis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// timeout bounds the time spent on Redis.
const timeout = 10 * time.Second

// usageError reports bad arguments: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// run is the command: it returns the exit status, having printed what
// the user needs to read.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := publish(ctx, args, stdin, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(stderr, "ratekit-rules:", ue.msg)
			fmt.Fprintln(stderr, "usage: ratekit-rules -redis URL -key KEY [-keys NAME,...] [-dry-run] FILE")
		}
		return 2
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "ratekit-rules:", line)
	}
	return 1
}

func publish(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratekit-rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratekit-rules -redis URL -key KEY [-keys NAME,...] [-dry-run] FILE\n\nChecks a rules file and publishes it under a Redis key for rulesredis.Watch.\nFILE - reads standard input.\n\nFlags:")
		fs.PrintDefaults()
	}
	var (
		url    = fs.String("redis", "", "Redis to publish to: a redis:// or rediss:// `URL`, or a comma-separated list of host:port of Redis Cluster nodes (required unless -dry-run)")
		key    = fs.String("key", "", "`KEY` under which the servers' rulesredis.Watch reads the rules, such as ratekit:rules:api (required unless -dry-run)")
		keys   = fs.String("keys", "", "comma-separated `names` of the descriptor keys the application registers with rules.WithKey (and user, if it sets rules.WithUserKey)")
		dryRun = fs.Bool("dry-run", false, "check the file only; do not publish it")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{} // the flag package has printed the problem and the usage
	}
	switch {
	case fs.NArg() != 1:
		return usagef("want one rules file (or - for standard input), got %d arguments", fs.NArg())
	case *dryRun:
	case *key == "":
		return usagef("-key is required (unless -dry-run)")
	case *url == "":
		return usagef("-redis is required (unless -dry-run)")
	}
	engine, err := scratchEngine(*keys)
	if err != nil {
		return err
	}
	var newClient func() redis.UniversalClient
	if !*dryRun {
		if newClient, err = parseRedis(*url); err != nil {
			return err
		}
	}

	name := fs.Arg(0)
	data, err := readFile(name, stdin)
	if err != nil {
		return err
	}
	// Checked under the file's name first, so that errors point into the
	// file; Publish checks again, under the key's name.
	cfg, err := rulesfile.Parse(name, data)
	if err != nil {
		return err
	}
	if err := engine.Load(cfg); err != nil {
		return err
	}
	if *dryRun {
		fmt.Fprintf(stdout, "%s: valid (domain %q, %d bytes); not published (-dry-run)\n", name, cfg.Domain, len(data))
		return nil
	}

	rdb := newClient()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rulesredis.Publish(ctx, rdb, *key, data, engine.Load); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: published under %q (domain %q, %d bytes)\n", name, *key, cfg.Domain, len(data))
	return nil
}

// userKey is the context key of the scratch engine's rules.WithUserKey:
// the engine only checks rules, it decides no requests.
type userKey struct{}

// scratchEngine returns an engine that knows the descriptor keys of the
// comma-separated list names, to check documents with.
func scratchEngine(names string) (*rules.Engine, error) {
	var opts []rules.Option
	none := func(rules.Request) (string, error) { return "", nil }
	for _, name := range strings.Split(names, ",") {
		switch name = strings.TrimSpace(name); name {
		case "":
		case "user":
			opts = append(opts, rules.WithUserKey(userKey{}))
		default:
			opts = append(opts, rules.WithKey(name, none))
		}
	}
	e, err := rules.NewEngine(opts...)
	if err != nil {
		return nil, usagef("-keys %q: %v (list only the keys the application registers; built-in keys such as remote_address and header:NAME need no mention)", names, err)
	}
	return e, nil
}

// parseRedis validates -redis and returns a function that makes its
// client.
func parseRedis(url string) (func() redis.UniversalClient, error) {
	noMaint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if strings.Contains(url, "://") {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, usagef("-redis %q: %v (want redis://[user:password@]host:port/db, rediss://... or host:port,host:port for a cluster)", url, err)
		}
		opts.ContextTimeoutEnabled, opts.MaintNotificationsConfig = true, noMaint
		return func() redis.UniversalClient { return redis.NewClient(opts) }, nil
	}
	var addrs []string
	for _, addr := range strings.Split(url, ",") {
		addr = strings.TrimSpace(addr)
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return nil, usagef("-redis %q: %q is not host:port (want redis://host:port/db, or host:port,host:port for a cluster)", url, addr)
		}
		addrs = append(addrs, addr)
	}
	return func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaint})
	}, nil
}

// readFile reads the rules file name, or stdin for "-", refusing one
// larger than rulesredis.MaxSize without reading it all.
func readFile(name string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, rulesredis.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > rulesredis.MaxSize {
		return nil, fmt.Errorf("%s: %w", name, rulesredis.ErrTooLarge)
	}
	return data, nil
}
