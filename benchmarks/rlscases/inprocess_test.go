package rlscases

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/overlimit"
	"github.com/ratekit/ratekit/redisstore"
	"github.com/ratekit/ratekit/redisstore/redistest"
	"github.com/ratekit/ratekit/rls"
	"github.com/ratekit/ratekit/rules"
	"github.com/ratekit/ratekit/rulesfile"
)

// startInProcess serves the cases' configuration from this process as
// `ratekit serve -config DIR -store redis` does (cmd/ratekit, serve.go and
// serve_store.go), with its defaults: a private redis-server, a go-redis
// client with ContextTimeoutEnabled, redisstore.New on it behind the
// over-limit cache (overlimit.New, -over-limit-cache=true), one
// rules.Engine per file of the directory loaded by rulesfile
// (rules.WithAnyKey), and package rls with WithLimitOverrides
// (-limit-overrides=true) on a gRPC server listening on 127.0.0.1. It
// returns a connection to it.
func startInProcess(t *testing.T) *grpc.ClientConn {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	rs, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	store, err := overlimit.New(rs)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if err := WriteConfig(dir); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var engines []*rules.Engine
	for _, f := range files {
		e, err := rules.NewEngine(rules.WithStore(store), rules.WithAnyKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := rulesfile.Load(e, f); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	svc, err := rls.New(engines, rls.WithLimitOverrides(store), rls.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc.Register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("grpc Serve: %v", err)
		}
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestRatekitServeInProcess plays every case on ratekit's rate limit
// service built as ratekit serve builds it (startInProcess), on a real
// Redis, without the reference or a ratekit binary. Every answer must be
// the reference's, except in the listed cases, which must differ exactly
// as listed (checkRatekit).
func TestRatekitServeInProcess(t *testing.T) {
	conn := startInProcess(t)
	ctx := context.Background()
	checkRatekit(t, Cases(), Run(ctx, conn, Cases()))

	// The check can fail: a case whose ratekit answers are dropped
	// differs from the reference's, unlisted, on the code alone.
	var empty Case
	for _, c := range Cases() {
		if c.Name == "empty-domain" {
			empty = c
		}
	}
	empty.Steps[0].Ratekit, empty.Reason = nil, ""
	diffs := Run(ctx, conn, []Case{empty})
	if len(diffs) != 1 || diffs[0].Listed || diffs[0].Detail != "error: got gRPC code InvalidArgument, want Unknown" {
		t.Errorf("empty-domain without its ratekit answer: diffs = %v, want one unlisted on the code", diffs)
	}
}

// checkRatekit checks ratekit's differences from the reference: none in
// a case that is not listed, and in a listed case the listed ones (every
// answer the case's ratekit answer, with its reason), so that a listed
// difference that went away is noticed too.
func checkRatekit(t *testing.T, cases []Case, diffs []Diff) {
	t.Helper()
	byCase := map[string][]Diff{}
	for _, d := range diffs {
		byCase[d.Case] = append(byCase[d.Case], d)
	}
	for _, c := range cases {
		ds := byCase[c.Name]
		if c.Listed() && len(ds) == 0 {
			t.Errorf("ratekit: %s: answered as the reference, want the listed difference (%s)", c.Name, c.Reason)
		}
		for _, d := range ds {
			if !d.Listed || d.Reason != c.Reason {
				t.Errorf("ratekit: %s (got %s; want %s)", d, d.Got, d.Want)
			}
		}
		delete(byCase, c.Name)
	}
	for name, ds := range byCase {
		t.Errorf("ratekit: differences of no case %q: %v", name, ds)
	}
}
