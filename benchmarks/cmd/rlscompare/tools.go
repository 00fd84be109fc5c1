package main

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A tool is a Go program the comparison installs at a pinned version.
type tool struct {
	name    string // the binary's name
	module  string // the module that holds it
	pkg     string // its package path
	version string // the pinned version
}

// The reference service and the load generator, at the versions the
// figures were taken with.
var (
	referenceTool = tool{
		name:    "service_cmd",
		module:  "github.com/envoyproxy/ratelimit",
		pkg:     "github.com/envoyproxy/ratelimit/src/service_cmd",
		version: "v1.4.1-0.20260122083618-3fb702589d36",
	}
	ghzTool = tool{
		name:    "ghz",
		module:  "github.com/bojand/ghz",
		pkg:     "github.com/bojand/ghz/cmd/ghz",
		version: "v0.93.0",
	}
)

// defaultToolsDir returns the directory the tools are installed into by
// default: ratekit-tools next to the Go build cache.
func defaultToolsDir() (string, error) {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		return "", errors.New("no Go build cache (GOCACHE is off): pass -tools")
	}
	return filepath.Join(filepath.Dir(cache), "ratekit-tools"), nil
}

// ensure returns the path of the tool in dir, installing it with go
// install when it is missing or of another version.
func (t tool) ensure(dir string, logf func(string, ...any)) (string, error) {
	path := filepath.Join(dir, t.name)
	if v, err := moduleVersion(path); err == nil && v == t.module+"@"+t.version {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	logf("installing %s@%s into %s (about a minute)", t.pkg, t.version, dir)
	cmd := exec.Command("go", "install", t.pkg+"@"+t.version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "GOWORK=off")
	// Outside any module, so that no go.mod or go.work takes part.
	cmd.Dir = os.TempDir()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", t.pkg, t.version, err)
	}
	v, err := moduleVersion(path)
	if err != nil {
		return "", err
	}
	if v != t.module+"@"+t.version {
		return "", fmt.Errorf("%s is %s after go install, want %s@%s", path, v, t.module, t.version)
	}
	return path, nil
}

// moduleVersion returns "module@version" of the main module of a Go
// binary.
func moduleVersion(path string) (string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", err
	}
	return info.Main.Path + "@" + info.Main.Version, nil
}

// describeBinary returns the main module, its version and the Go version
// of a Go binary, for the report.
func describeBinary(path string) string {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return path + " (" + err.Error() + ")"
	}
	s := fmt.Sprintf("%s %s, built with %s", info.Main.Path, info.Main.Version, info.GoVersion)
	for _, set := range info.Settings {
		if set.Key == "vcs.revision" {
			s += ", revision " + set.Value
		}
	}
	return s
}

// workspaceRoot returns the directory of the go.work the command runs in.
func workspaceRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", errors.New("not inside the ratekit workspace (no go.work): run from the repository or pass -ratekit")
	}
	return filepath.Dir(work), nil
}

// buildRatekit builds the ratekit command of the workspace into dir.
func buildRatekit(dir string, logf func(string, ...any)) (string, error) {
	root, err := workspaceRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "ratekit")
	logf("building ./cmd/ratekit of %s", root)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/ratekit")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ratekit: %w (use -only reference to run the reference alone)", err)
	}
	return out, nil
}
