package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// stacks are the stacks whose quick start the rehearsal runs: a Markdown
// file must hold the whole program quickstart-STACK for each.
var stacks = []string{"stdhttp", "gin", "echo", "echo5", "fiber", "fiber3", "chi"}

// installed are the modules README.md must give an install line for.
var installed = []string{
	rootPath,
	rootPath + "/gin", rootPath + "/echo", rootPath + "/echo5",
	rootPath + "/fiber", rootPath + "/fiber3", rootPath + "/chi",
	rootPath + "/redisstore", rootPath + "/prometheus", rootPath + "/otel",
	rootPath + "/grpc", rootPath + "/connect", rootPath + "/rls", rootPath + "/rulesfile", rootPath + "/cmd/ratekit",
}

// quickStartLimit is the limit of every quick start: LimitByIP(100,
// time.Minute), so one client is admitted 100 times and refused the 101st.
const quickStartLimit = 100

// An installLine is one `go get` or `go install` line of README.md.
type installLine struct {
	line   int      // in README.md
	args   []string // after "go"
	module string   // the module path it names, without a version
}

// A program is a whole program of a Markdown file.
type program struct {
	name string // its snippet name
	at   string // file:line
	src  string
}

// installRE finds the install lines: go get or go install of a module of
// the repository, with an optional @version and comment.
var installRE = regexp.MustCompile(`^go (get|install) (` + regexp.QuoteMeta(rootPath) + `[^\s@]*)(@\S+)?\s*(#.*)?$`)

// installLines reads the install lines of the shell blocks of a Markdown
// file.
func installLines(markdown []byte) []installLine {
	var (
		out     []installLine
		inShell bool
		fence   string
	)
	sc := bufio.NewScanner(bytes.NewReader(markdown))
	for n := 1; sc.Scan(); n++ {
		t := strings.TrimSpace(sc.Text())
		if fence != "" {
			if strings.HasPrefix(t, fence) && strings.Trim(t, "`") == "" {
				fence, inShell = "", false
				continue
			}
			if !inShell {
				continue
			}
			t = strings.TrimPrefix(t, "$ ")
			if m := installRE.FindStringSubmatch(t); m != nil {
				code := strings.TrimSpace(strings.SplitN(t, "#", 2)[0])
				out = append(out, installLine{line: n, args: strings.Fields(code)[1:], module: m[2]})
			}
			continue
		}
		if strings.HasPrefix(t, "```") {
			fence = t[:len(t)-len(strings.TrimLeft(t, "`"))]
			switch strings.TrimSpace(strings.TrimLeft(t, "`")) {
			case "sh", "bash", "shell", "console", "":
				inShell = true
			}
		}
	}
	return out
}

// snippetRE is the marker line before a Go block (see examples/readme).
var snippetRE = regexp.MustCompile(`^<!-- snippet: ([A-Za-z0-9_.-]+) -->$`)

// programs reads the whole programs of a Markdown file: the Go blocks that
// start with a package clause, by their snippet names.
func programs(file string, markdown []byte) []program {
	lines := strings.Split(strings.ReplaceAll(string(markdown), "\r\n", "\n"), "\n")
	var out []program
	for i := 0; i+1 < len(lines); i++ {
		m := snippetRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil || strings.TrimSpace(lines[i+1]) != "```go" {
			continue
		}
		var body []string
		for j := i + 2; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, lines[j])
		}
		src := strings.Join(body, "\n") + "\n"
		if strings.HasPrefix(strings.TrimSpace(src), "package ") {
			out = append(out, program{name: m[1], at: fmt.Sprintf("%s:%d", file, i+2), src: src})
		}
	}
	return out
}

// markdownFiles lists the Markdown files of the tree.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// A rehearsal holds the environment of the newcomer's go commands.
type rehearsal struct {
	work string   // the folder of the newcomer's modules
	env  []string // GOWORK=off, the proxy first, no checksum database for this repository
}

// rehearse writes the proxy and plays the newcomer; see the package doc.
func rehearse(root string, keep bool) error {
	start := time.Now()
	version, err := readVersion(root)
	if err != nil {
		return err
	}
	mods, err := modules(root)
	if err != nil {
		return err
	}
	var faults []string
	if fs := consistent(mods, version); len(fs) > 0 {
		fmt.Printf("release: the go.mod files disagree with VERSION (%s); rehearsing anyway, to show what a user meets:\n", version)
		for _, f := range fs {
			fmt.Println("  " + f)
		}
		faults = append(faults, fmt.Sprintf("%d go.mod faults (above)", len(fs)))
	}

	work, err := os.MkdirTemp("", "ratekit-rehearsal-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("release: rehearsal folder", work)
	} else {
		defer os.RemoveAll(work)
	}
	proxy := filepath.Join(work, "proxy")
	if err := writeProxy(root, proxy, version, mods, time.Now()); err != nil {
		return err
	}
	fmt.Printf("release: published %d modules at %s in a file proxy\n", len(mods), version)

	r, err := newRehearsal(work, proxy)
	if err != nil {
		return err
	}
	// The module cache must not answer for this repository from an earlier
	// rehearsal of another tree at the same version.
	if err := r.forgetRepository(); err != nil {
		return err
	}
	defer r.forgetRepository()

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return err
	}
	lines := installLines(readme)
	byModule := map[string]installLine{}
	for _, l := range lines {
		byModule[l.module] = l
	}
	for _, m := range installed {
		if _, ok := byModule[m]; !ok {
			faults = append(faults, fmt.Sprintf("README.md has no install line for %s", m))
		}
	}

	// 1. Every install line, each in a fresh module.
	for i, l := range lines {
		dir := filepath.Join(work, fmt.Sprintf("install-%02d", i))
		if err := r.newModule(dir); err != nil {
			return err
		}
		cmdline := "go " + strings.Join(l.args, " ")
		env := r.env
		if l.args[0] == "install" {
			env = append(append([]string(nil), env...), "GOBIN="+filepath.Join(dir, "bin"))
		}
		if out, err := r.goCmd(dir, env, l.args...); err != nil {
			faults = append(faults, fmt.Sprintf("README.md:%d: %s failed:\n%s", l.line, cmdline, indent(out)))
			continue
		}
		if l.args[0] == "install" {
			bin := filepath.Join(dir, "bin", filepath.Base(l.module))
			// The command's help names its subcommands (its exit status
			// is that of a usage message).
			out, err := exec.Command(bin, "help").CombinedOutput()
			if !strings.Contains(string(out), "replay") {
				faults = append(faults, fmt.Sprintf("README.md:%d: %s installed a command whose help does not answer: %v\n%s", l.line, cmdline, err, indent(string(out))))
				continue
			}
		}
		fmt.Printf("release: ok   README.md:%d %s\n", l.line, cmdline)
	}

	// 2. Every whole program of the Markdown files: built; quick starts run.
	files, err := markdownFiles(root)
	if err != nil {
		return err
	}
	var progs []program
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, f)
		progs = append(progs, programs(filepath.ToSlash(rel), data)...)
	}
	seen := map[string]bool{}
	for _, p := range progs {
		seen[p.name] = true
		if err := r.program(p, lines); err != nil {
			faults = append(faults, fmt.Sprintf("%s: program %s: %v", p.at, p.name, err))
			continue
		}
	}
	for _, s := range stacks {
		if !seen["quickstart-"+s] {
			faults = append(faults, fmt.Sprintf("no Markdown file holds the quick start quickstart-%s (a ```go block that starts with package main)", s))
		}
	}

	if len(faults) > 0 {
		return fmt.Errorf("the rehearsal of %s failed (%s):\n%s", version, time.Since(start).Round(time.Second), strings.Join(faults, "\n"))
	}
	fmt.Printf("release: rehearsal of %s passed in %s: %d install lines, %d programs built, %d quick starts answered 429 after %d requests\n",
		version, time.Since(start).Round(time.Second), len(lines), len(progs), len(stacks), quickStartLimit)
	return nil
}

// newRehearsal sets up the newcomer's environment: outside the workspace,
// no module index (see below), the proxy first, then the module cache's download folder (itself a
// proxy, so that what the machine has is not fetched again), then the
// machine's own proxy setting, and no checksum database for this
// repository's rehearsed modules.
func newRehearsal(work, proxy string) (*rehearsal, error) {
	goenv := func(name string) (string, error) {
		out, err := exec.Command("go", "env", name).Output()
		return strings.TrimSpace(string(out)), err
	}
	modcache, err := goenv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	upstream, err := goenv("GOPROXY")
	if err != nil {
		return nil, err
	}
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(modcache, "cache", "download"))
	if upstream != "" && upstream != "off" {
		proxies += "," + upstream
	}
	// The go command takes a version in the module cache for immutable and
	// indexes its packages' imports once, in the build cache; a rehearsal
	// republishes the same version with other content, so the index must
	// not answer (goindex=0), besides forgetting the extracted copies.
	godebug := "goindex=0"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	env := os.Environ()
	env = append(env,
		"GODEBUG="+godebug,
		"GOWORK=off",
		"GOFLAGS=-mod=mod -buildvcs=false",
		"GOPROXY="+proxies,
		"GONOSUMDB="+rootPath,
		"GOPRIVATE=",
		"GONOPROXY=",
	)
	return &rehearsal{work: work, env: env}, nil
}

// forgetRepository removes this repository's modules from the module
// cache (the rehearsal is the only thing that puts them there).
func (r *rehearsal) forgetRepository() error {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return err
	}
	modcache := strings.TrimSpace(string(out))
	// The extracted copies (ratekit@v…, and ratekit/ holding gin@v… and
	// the others), and the downloads.
	for _, p := range []string{
		filepath.Join(modcache, filepath.FromSlash(rootPath)),
		filepath.Join(modcache, "cache", "download", filepath.FromSlash(rootPath)),
	} {
		matches, _ := filepath.Glob(p + "*")
		for _, m := range matches {
			// The module cache's files are read-only.
			filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					os.Chmod(p, 0o755)
				}
				return nil
			})
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// newModule makes a fresh module in dir, as a newcomer's app.
func (r *rehearsal) newModule(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := r.goCmd(dir, r.env, "mod", "init", "example.com/newcomer"); err != nil {
		return fmt.Errorf("go mod init: %v\n%s", err, out)
	}
	return nil
}

// goCmd runs the go command in dir with env.
func (r *rehearsal) goCmd(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// program builds p in a fresh module, after the install lines of the
// modules it imports, and runs it if it is a quick start.
func (r *rehearsal) program(p program, lines []installLine) error {
	dir := filepath.Join(r.work, "program-"+p.name)
	if err := r.newModule(dir); err != nil {
		return err
	}
	src := p.src
	quick := strings.HasPrefix(p.name, "quickstart-")
	var addr string
	if quick {
		if strings.Count(src, `":8080"`) != 1 {
			return errors.New(`a quick start must listen on the literal ":8080" once (the rehearsal serves it on a free port instead)`)
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		src = strings.Replace(src, `":8080"`, `"`+addr+`"`, 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return err
	}
	// The install line of the module of each package the program imports
	// (the longest module path that holds it), as README tells a newcomer.
	imports, err := importPaths(src)
	if err != nil {
		return err
	}
	var ran []string
	done := map[string]bool{}
	for _, imp := range imports {
		var best *installLine
		for i, l := range lines {
			if l.args[0] == "get" && (imp == l.module || strings.HasPrefix(imp, l.module+"/")) && (best == nil || len(l.module) > len(best.module)) {
				best = &lines[i]
			}
		}
		if best == nil || done[best.module] {
			continue
		}
		done[best.module] = true
		if out, err := r.goCmd(dir, r.env, best.args...); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(best.args, " "), err, indent(out))
		}
		ran = append(ran, "go "+strings.Join(best.args, " "))
	}
	if out, err := r.goCmd(dir, r.env, "mod", "tidy"); err != nil {
		return fmt.Errorf("go mod tidy: %v\n%s", err, indent(out))
	}
	bin := filepath.Join(dir, "app")
	if out, err := r.goCmd(dir, r.env, "build", "-o", bin, "."); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, indent(out))
	}
	if !quick {
		fmt.Printf("release: ok   %s %s builds (after %s)\n", p.at, p.name, strings.Join(ran, "; "))
		return nil
	}
	if err := runQuickStart(bin, addr); err != nil {
		return err
	}
	fmt.Printf("release: ok   %s %s builds and answers 429 after %d requests (after %s)\n", p.at, p.name, quickStartLimit, strings.Join(ran, "; "))
	return nil
}

// runQuickStart starts a quick start's binary, which serves on addr, and
// checks that one client is admitted quickStartLimit times and refused the
// next with 429 and Retry-After. It stops the process it started, by its
// PID.
func runQuickStart(bin, addr string) error {
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + addr + "/"
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited before serving: %v\n%s", err, indent(out.String()))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving on %s after 30 s\n%s", addr, indent(out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i <= quickStartLimit+1; i++ {
		resp, err := client.Get(url)
		if err != nil {
			return fmt.Errorf("request %d: %v", i, err)
		}
		resp.Body.Close()
		switch {
		case i <= quickStartLimit && resp.StatusCode != http.StatusOK:
			return fmt.Errorf("request %d answered %s, want 200 (the limit is %d)", i, resp.Status, quickStartLimit)
		case i > quickStartLimit && resp.StatusCode != http.StatusTooManyRequests:
			return fmt.Errorf("request %d answered %s, want 429 Too Many Requests", i, resp.Status)
		case i > quickStartLimit && resp.Header.Get("Retry-After") == "":
			return fmt.Errorf("request %d answered 429 without Retry-After", i)
		}
	}
	return nil
}

// importPaths returns the paths a Go file imports, in order.
func importPaths(src string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// indent indents a command's output under the fault that quotes it.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
