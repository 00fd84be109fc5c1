package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGuideShowsRulesFile checks that docs/rules.md shows this program's
// rules.yaml as it is, in a yaml block.
func TestGuideShowsRulesFile(t *testing.T) {
	rulesFile, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), "```yaml\n"+string(rulesFile)+"```\n") {
		t.Errorf("docs/rules.md has no yaml block equal to rules.yaml:\n%s", rulesFile)
	}
}

// TestQuickstart runs the program on a copy of its rules file: the fourth
// login in a minute is refused, and raising the login limit in the file
// while the program runs admits two more, keeping the count.
func TestQuickstart(t *testing.T) {
	// The rules count in fixed windows of one minute: start well inside one.
	if s := time.Now().Second(); s > 40 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	data, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	go func() { t.Logf("run: %v", run(path, addr)) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program does not listen on %s: %v", addr, err)
		}
	}

	login := func() int {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var got []int
	for range 4 {
		got = append(got, login())
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Fatalf("four logins: %v, want %v", got, want)
	}

	// Raise the login limit from 3 to 5, saved as editors do: a new file
	// renamed over the old one.
	raised := strings.Replace(string(data), "requests_per_unit: 3", "requests_per_unit: 5", 1)
	if raised == string(data) {
		t.Fatal("rules.yaml has no login limit of 3")
	}
	tmp := filepath.Join(dir, "rules.yaml.new")
	if err := os.WriteFile(tmp, []byte(raised), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); login() != http.StatusOK; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the raised login limit did not apply within 10 s")
		}
	}
	if s := login(); s != http.StatusOK {
		t.Errorf("fifth login: status %d, want 200", s)
	}
	if s := login(); s != http.StatusTooManyRequests {
		t.Errorf("sixth login: status %d, want 429 (the count kept across the reload)", s)
	}
}
