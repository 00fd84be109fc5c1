package demo

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/cli"
)

// This file names the demo's programs, and says what a program is doing:
// the line it prints as it starts, and the one once it listens.

// frameworks are the values of -framework, each with the command that
// runs its program (from the root of the repository).
var frameworks = []struct{ name, command string }{
	{"stdhttp", "go run ./examples/demo"},
	{"gin", "go run ./examples/demo/gin"},
	{"echo", "go run ./examples/demo/echo"},
	{"echo5", "go run ./examples/demo/echo5"},
	{"fiber", "go run ./examples/demo/fiber"},
	{"fiber3", "go run ./examples/demo/fiber3"},
	{"chi", "go run ./examples/demo/chi"},
}

// metricsProgram is the command of the default program with -metrics.
const metricsProgram = "go run ./examples/demo/metrics"

// frameworkNames returns the values of -framework, for help and errors.
func frameworkNames() string {
	names := make([]string, len(frameworks))
	for i, f := range frameworks {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// checkFramework validates -framework: a program serves its own
// framework only, and names the program of another.
func checkFramework(p Program, name string) error {
	if name == p.Framework {
		return nil
	}
	for _, f := range frameworks {
		if f.name == name {
			return cli.Usagef("-framework %s: this program serves %s only, so as not to build the other frameworks; run %s (the same demo and flags)", name, p.Framework, f.command)
		}
	}
	return cli.Usagef("-framework: unknown framework %q (valid: %s)", name, frameworkNames())
}

// startLine is the first line the demo prints, once its flags are
// valid: where it will listen, and what GET / allows.
func (c *config) startLine(p Program) string {
	return fmt.Sprintf("demo: starting on %s with %s: %s; POST /login %s (-h lists the flags)",
		c.addr, p.Router, c.mainPolicy(), describeLimit(loginLimit, "per client IP"))
}

// mainPolicy says what limits GET / (and every other request).
func (c *config) mainPolicy() string {
	var where string
	switch c.store {
	case "redis":
		where = "in Redis at " + c.redisAddr()
	case "hybrid":
		where = "in memory on leases from Redis at " + c.redisAddr()
		if c.region != "" {
			where += ", region " + c.region
		}
	default:
		where = "in memory"
	}
	switch {
	case c.rulesRedis != nil:
		return fmt.Sprintf("GET / limited by the rules under Redis key %s at %s, counted %s", c.rulesRedis.key, c.rulesRedis.options.Addr, where)
	case c.rulesFile != "":
		return fmt.Sprintf("GET / limited by the rules of %s, counted %s", c.rulesFile, where)
	}
	s := "GET / allows " + describeLimit(c.limit, describeKey(c.key)) + ", counted " + where
	if c.elastic > 0 {
		s += fmt.Sprintf(", up to %d%% more while there is room", c.elastic)
	}
	return s
}

// redisAddr is the address of the -redis server, or the cluster's nodes.
func (c *config) redisAddr() string {
	if c.redis.cluster != nil {
		return strings.Join(c.redis.cluster, ",")
	}
	return c.redis.options.Addr
}

// describeLimit says l in words: "10 requests per minute per client IP
// (sliding-window-counter)".
func describeLimit(l core.Limit, per string) string {
	s := fmt.Sprintf("%d requests per %s %s (%s", l.Rate.Count, describePeriod(l.Rate.Period), per, l.Algorithm)
	if l.Burst > 0 {
		s += fmt.Sprintf(", bursts of %d", l.Burst)
	}
	if l.Shaping {
		s += ", shaped"
	}
	return s + ")"
}

// describePeriod says d as the unit it is, or as a duration.
func describePeriod(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return d.String()
}

// describeKey says what -key counts by.
func describeKey(key string) string {
	kind, name, _ := strings.Cut(key, ":")
	switch kind {
	case "header":
		return "per " + name + " header"
	case "query":
		return "per ?" + name + "= value"
	}
	return "per client IP"
}

// tryLine is the line the demo prints once it listens at addr: what to
// curl, and where the routes are told.
func tryLine(addr net.Addr, metrics bool) string {
	host := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		host = net.JoinHostPort("localhost", fmt.Sprint(ta.Port))
	}
	routes := "GET / /healthz /upstream"
	if metrics {
		routes += " /metrics"
	}
	return fmt.Sprintf("demo: try: curl -i http://%s/   (routes: %s, POST /login /orders /reports; see examples/demo/README.md)", host, routes)
}
