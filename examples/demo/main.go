// Command demo serves a small HTTP API guarded by ratekit, to try the
// algorithms, header styles, key functions, stores and the ways of
// treating traffic over a limit from the command line:
//
//	go run ./examples/demo -algorithm token-bucket -limit 5 -period 10s
//	curl -i http://127.0.0.1:8080/
//
// As it starts, the demo prints to standard error where it will listen
// and what GET / allows; once it listens, a curl line to try and, to
// standard output, "listening on ADDR". examples/demo/README.md tells the
// routes and flags with more examples.
//
// This program serves the routes with net/http's ServeMux and package
// stdhttp, and builds no web framework, no OpenTelemetry and no
// Prometheus client, so that its first run is quick; it builds go-redis,
// for -store redis. Each framework has a program of its own, built only
// when it is run, with the same routes, flags and answers (status,
// rate-limit headers and problem-details body), and -metrics:
//
//	go run ./examples/demo/gin       Gin and ratekitgin
//	go run ./examples/demo/echo      Echo v4 and ratekitecho
//	go run ./examples/demo/echo5     Echo v5 and ratekitecho5
//	go run ./examples/demo/fiber     Fiber v2 and ratekitfiber
//	go run ./examples/demo/fiber3    Fiber v3 and ratekitfiber3
//	go run ./examples/demo/chi       Chi and ratekitchi
//	go run ./examples/demo/metrics   this program, with -metrics on
//
// The programs share the routes through the internal package demo, which
// imports no framework. -framework NAME names the one a program serves:
// here stdhttp; given another, the demo exits with status 2 and the
// command of the program that serves it. -metrics, likewise, names
// examples/demo/metrics, as this program leaves the Prometheus client out.
//
// Routes:
//
//	GET  /         "hello", limited as the flags say
//	GET  /healthz  "ok", never limited
//	GET  /metrics  with -metrics (examples/demo/metrics and the framework
//	               programs): Prometheus metrics, never limited
//	POST /login    its own strict limit: 5 per minute per client IP
//	               (fixed window), counted apart from the rest
//	POST /orders   needs "Authorization: Bearer alice-t0ken" (or
//	               bob-t0ken), checked before the limit: 401 without it,
//	               never queued; 2 per second per client IP; over it, the
//	               order is queued (202 Accepted and its ID; at most 20
//	               per client, then 429) and placed later by a worker at 2
//	               per second, which logs it (internal/demo/orders.go)
//	POST /reports  a slow report: ?ms= milliseconds of work (default
//	               1000, at most 5000); 10 per minute per client IP, then
//	               at most 2 at once per client IP, the third answered 429
//	               (internal/demo/reports.go)
//	GET  /upstream calls a provider through a client paced to 5 calls a
//	               second (bursts of 2): over the pace a call waits its
//	               turn, at most 5 s, and is not answered 429; answers the
//	               provider's status and the wait. Not limited itself
//	               (internal/demo/upstream.go).
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
// exact when it has as many (internal/demo/elastic.go). An elastic
// admission has X-RateLimit-Remaining 0 and, with -metrics, counts as
// decision="elastic_allowed". It needs the flag-built limit (not -config)
// and -store memory or redis (not hybrid).
//
//	go run ./examples/demo/metrics -limit 5 -elastic 100
//
// With -config FILE the limits of GET / (and of every other request) come
// from a rules file instead of the flags: the schema of the Envoy
// rate-limit service plus ratekit's extensions (see package rulesfile and
// examples/rules/demo.yaml). Its rules also apply to POST /login, after
// the login limit (whose headers they then replace), so a rule can target
// it. The file is watched: a valid edit applies within a second or two,
// keeping the counts, and an invalid one is logged to standard error and
// ignored.
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
//	go run ./examples/demo/echo -store redis -redis redis://127.0.0.1:6379/0 -addr 127.0.0.1:8081 &
//
// With -store hybrid each demo server decides requests in its own memory,
// on leases of the limit that it takes from the Redis of -redis in
// batches, and syncs with that Redis every -sync-interval (default 1s):
// most requests cost no round trip, and the servers on one Redis still
// admit the limit exactly between them (package redisstore/hybrid).
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
// standard output, after "demo: admin listening on URL" (with -admin) and
// the curl line to standard error. It shuts down gracefully on SIGINT and
// SIGTERM, with -store hybrid after a last sync that sends what it
// counted and gives back its unused leases. An invalid flag exits with
// status 2 and a message that names the valid values.
package main

import "github.com/ratekit/ratekit/examples/demo/internal/demo"

func main() { demo.Main(demo.StdHTTP) }
