package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func mod(dir string, requires ...string) module {
	m := module{Path: strings.TrimSuffix(rootPath+"/"+dir, "/."), Dir: dir, Requires: map[string]string{}}
	for _, r := range requires {
		m.Requires[strings.TrimSuffix(rootPath+"/"+r, "/.")] = "v0.1.0"
	}
	return m
}

func paths(mods []module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Dir)
	}
	return out
}

func TestDependencyOrder(t *testing.T) {
	mods := []module{
		mod("rulesredis", ".", "redisstore", "rulesfile"),
		mod("gin", "."),
		mod("redisstore", "."),
		mod("."),
		mod("rulesfile", "."),
	}
	got, err := dependencyOrder(mods)
	if err != nil {
		t.Fatal(err)
	}
	// The root first; each module after what it requires; ties by path.
	want := []string{".", "gin", "redisstore", "rulesfile", "rulesredis"}
	if !reflect.DeepEqual(paths(got), want) {
		t.Errorf("order %q, want %q", paths(got), want)
	}

	_, err = dependencyOrder([]module{mod("a", "b"), mod("b", "a")})
	if err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("a cycle: err = %v", err)
	}
	_, err = dependencyOrder([]module{mod("gin", ".")})
	if err == nil || !strings.Contains(err.Error(), "go.work does not use") {
		t.Errorf("a requirement outside the workspace: err = %v", err)
	}
}

func TestConsistent(t *testing.T) {
	gin := mod("gin", ".")
	if f := consistent([]module{mod("."), gin}, "v0.1.0"); len(f) != 0 {
		t.Errorf("faults %q, want none", f)
	}
	// Today's failure: a module requiring the placeholder v0.0.0, and a
	// replace directive.
	gin.Requires[rootPath] = "v0.0.0"
	gin.Replaces = []string{rootPath}
	f := consistent([]module{mod("."), gin}, "v0.1.0")
	if len(f) != 2 || !strings.Contains(f[0], "requires github.com/ratekit/ratekit v0.0.0, not v0.1.0") || !strings.Contains(f[1], "replaces") {
		t.Errorf("faults %q", f)
	}
}

func TestWorkFaults(t *testing.T) {
	mods := []module{mod("."), mod("gin", ".")}
	var work goWork
	add := func(path, version, dir string) {
		r := work.Replace
		r = append(r, struct {
			Old struct{ Path, Version string }
			New struct{ Path string }
		}{})
		r[len(r)-1].Old.Path, r[len(r)-1].Old.Version, r[len(r)-1].New.Path = path, version, dir
		work.Replace = r
	}
	add(rootPath, "v0.1.0", "./")
	add(rootPath+"/gin", "v0.0.9", "./gin")
	f := workFaults(work, mods, "v0.1.0")
	if len(f) != 1 || !strings.Contains(f[0], "does not replace github.com/ratekit/ratekit/gin v0.1.0") {
		t.Errorf("faults %q, want gin's replacement at v0.1.0 missing", f)
	}
	add(rootPath+"/gin", "v0.1.0", "./echo")
	if f := workFaults(work, mods, "v0.1.0"); len(f) != 1 || !strings.Contains(f[0], "not by its folder gin") {
		t.Errorf("faults %q, want gin replaced by the wrong folder", f)
	}
}

func TestInstallLines(t *testing.T) {
	md := "# x\n\n```sh\n" +
		"go get github.com/ratekit/ratekit          # net/http\n" +
		"go get github.com/ratekit/ratekit/gin@v0.1.0\n" +
		"$ go install github.com/ratekit/ratekit/cmd/ratekit@latest\n" +
		"go get github.com/other/thing\n" +
		"```\n\n```go\n// go get github.com/ratekit/ratekit/echo\n```\n\n```text\ngo get github.com/ratekit/ratekit/fiber\n```\n"
	got := installLines([]byte(md))
	want := []installLine{
		{line: 4, args: []string{"get", "github.com/ratekit/ratekit"}, module: "github.com/ratekit/ratekit"},
		{line: 5, args: []string{"get", "github.com/ratekit/ratekit/gin@v0.1.0"}, module: "github.com/ratekit/ratekit/gin"},
		{line: 6, args: []string{"install", "github.com/ratekit/ratekit/cmd/ratekit@latest"}, module: "github.com/ratekit/ratekit/cmd/ratekit"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("install lines\n got %+v\nwant %+v", got, want)
	}
}

func TestPrograms(t *testing.T) {
	md := "<!-- snippet: quickstart-gin -->\n```go\npackage main\n\nfunc main() {}\n```\n\n" +
		"<!-- snippet: fragment -->\n```go\nr.Use(x)\n```\n\n```go\npackage main\n```\n"
	got := programs("gin/README.md", []byte(md))
	if len(got) != 1 || got[0].name != "quickstart-gin" || got[0].at != "gin/README.md:2" || got[0].src != "package main\n\nfunc main() {}\n" {
		t.Errorf("programs %+v, want quickstart-gin alone (a fragment and an unmarked block are not programs)", got)
	}
	imports, err := importPaths("package main\n\nimport (\n\t\"net/http\"\n\tr \"github.com/ratekit/ratekit/gin\"\n)\n")
	if err != nil || !reflect.DeepEqual(imports, []string{"net/http", "github.com/ratekit/ratekit/gin"}) {
		t.Errorf("imports %q, %v", imports, err)
	}
}

func TestModuleFiles(t *testing.T) {
	mods := []module{mod("."), mod("cmd/ratekit", "."), mod("gin", ".")}
	files := []string{"README.md", "core/a.go", "cmd/ratekit/go.mod", "cmd/ratekit/main.go", "cmd/other.go", "gin/go.mod", "gin/gin.go", "gin/vendor/x/y.go", "ginx/a.go"}
	if got, want := moduleFiles(mods[0], mods, files), []string{"README.md", "core/a.go", "cmd/other.go", "ginx/a.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("root: %q, want %q", got, want)
	}
	if got, want := moduleFiles(mods[2], mods, files), []string{"go.mod", "gin.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("gin: %q, want %q", got, want)
	}
}

func TestEscapePath(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/ratekit/ratekit/gin": "github.com/ratekit/ratekit/gin",
		"github.com/Azure/Go":            "github.com/!azure/!go",
	} {
		if got, err := escapePath(in); err != nil || got != want {
			t.Errorf("escapePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := escapePath("a/b!c"); err == nil {
		t.Error("a path with '!' was escaped")
	}
}

// TestProxyServesGo writes a proxy of a small repository of two modules
// and has the go command itself download from it, with nothing else to
// reach: the proxy's layout and zips must be what the go command accepts.
func TestProxyServesGo(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.work", "go 1.24.0\n\nuse (\n\t.\n\t./gin\n)\n")
	write("go.mod", "module github.com/ratekit/ratekit\n\ngo 1.24.0\n")
	write("core/core.go", "package core\n\n// Answer is 42.\nconst Answer = 42\n")
	write("VERSION", "v0.1.0\n")
	write("gin/go.mod", "module github.com/ratekit/ratekit/gin\n\ngo 1.24.0\n\nrequire github.com/ratekit/ratekit v0.1.0\n")
	write("gin/gin.go", "package gin\n\nimport \"github.com/ratekit/ratekit/core\"\n\n// Answer is core's.\nconst Answer = core.Answer\n")
	write(".gitignore", "ignored.txt\n")
	write("ignored.txt", "not published\n")
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}

	mods, err := modules(root)
	if err != nil {
		t.Fatal(err)
	}
	if f := consistent(mods, "v0.1.0"); len(f) != 0 {
		t.Fatalf("faults %q", f)
	}
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := writeProxy(root, proxy, "v0.1.0", mods, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}

	zr, err := zip.OpenReader(filepath.Join(proxy, "github.com/ratekit/ratekit/@v/v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	zr.Close()
	sort.Strings(names)
	want := []string{
		"github.com/ratekit/ratekit@v0.1.0/.gitignore",
		"github.com/ratekit/ratekit@v0.1.0/VERSION",
		"github.com/ratekit/ratekit@v0.1.0/core/core.go",
		"github.com/ratekit/ratekit@v0.1.0/go.mod",
		"github.com/ratekit/ratekit@v0.1.0/go.work",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("root zip holds %q, want %q (no nested module, no ignored file)", names, want)
	}

	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte("module example.com/app\n\ngo 1.24.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte("package main\n\nimport \"github.com/ratekit/ratekit/gin\"\n\nfunc main() { println(gin.Answer) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	modcache := t.TempDir()
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = app
		cmd.Env = append(os.Environ(),
			"GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=file://"+filepath.ToSlash(proxy),
			"GONOSUMDB="+rootPath, "GOMODCACHE="+modcache, "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("get", "github.com/ratekit/ratekit/gin")
	if out := goCmd("run", "."); !strings.Contains(out, "42") {
		t.Errorf("the app printed %q, want 42", out)
	}
	// The module cache's files are read-only; let t.TempDir remove them.
	filepath.WalkDir(modcache, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}
