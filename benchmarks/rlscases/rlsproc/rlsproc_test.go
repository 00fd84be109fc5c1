package rlsproc

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestStartRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not on PATH")
		}
		t.Skip("redis-server not on PATH")
	}
	r, err := StartRedis(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(r.Addr); err != nil {
		t.Fatalf("PING after start: %v", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if !r.Exited() {
		t.Fatal("redis-server still running after Stop")
	}
	if err := ping(r.Addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	// Stopping again is no error.
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestStartReferenceFailure(t *testing.T) {
	script := t.TempDir() + "/service_cmd"
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"config error: $REDIS_URL\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := StartReference(context.Background(), ReferenceOptions{Bin: script, Root: t.TempDir(), RedisAddr: "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "exited before ready") || !strings.Contains(err.Error(), "config error: 127.0.0.1:1") {
		t.Fatalf("StartReference of a program that exits: %v, want an error with the end of its log", err)
	}
	_, err = StartReference(context.Background(), ReferenceOptions{Bin: script, Root: t.TempDir(), Stats: "statsd"})
	if err == nil || !strings.Contains(err.Error(), "unknown stats sink") {
		t.Fatalf("StartReference with an unknown sink: %v", err)
	}
}

func TestStartRatekitUnknownStore(t *testing.T) {
	_, err := StartRatekit(context.Background(), RatekitOptions{Bin: "ratekit", Store: "memory", ConfigDir: t.TempDir(), LogDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `unknown store "memory"`) {
		t.Fatalf("StartRatekit with store memory: %v", err)
	}
}
