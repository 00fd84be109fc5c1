package readme

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the repository's root, whose Markdown files (README.md,
// docs/*.md, each module's README.md, ...) hold the Go blocks this package
// compiles.
const repoRoot = "../.."

var (
	// markerRE is the line before each Go block of the README.
	markerRE = regexp.MustCompile(`^<!-- snippet: ([A-Za-z0-9_.-]+) -->$`)
	// startRE and endRE delimit a region in this package's Go files.
	startRE = regexp.MustCompile(`^\s*// snippet: ([A-Za-z0-9_.-]+)$`)
	endRE   = regexp.MustCompile(`^\s*// end snippet$`)
)

// A block is one ```go block of a Markdown file.
type block struct {
	file  string   // the Markdown file, relative to the repository's root
	name  string   // from its marker; "" if it has none
	line  int      // of its opening fence, from 1
	lines []string // between the fences, common indentation removed
}

// readmeBlocks returns the Go blocks of the README at path. Markers that do
// not precede a Go block are errors.
func readmeBlocks(path string) ([]block, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var (
		blocks []block
		errs   []string
		lines  = strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if m := markerRE.FindStringSubmatch(trimmed); m != nil {
			if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```go" {
				errs = append(errs, fmt.Sprintf("%s:%d: marker %q is not followed by a ```go line", path, i+1, m[1]))
			}
			continue
		}
		if strings.Contains(line, "<!-- snippet") {
			errs = append(errs, fmt.Sprintf("%s:%d: malformed marker %q (want <!-- snippet: NAME -->)", path, i+1, trimmed))
			continue
		}
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		// A fence: find its end, and keep the block if it is Go.
		fence := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
		lang := strings.TrimSpace(trimmed[len(fence):])
		start := i
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), fence); i++ {
			body = append(body, lines[i])
		}
		if i >= len(lines) {
			errs = append(errs, fmt.Sprintf("%s:%d: unterminated code block", path, start+1))
		}
		if lang != "go" && !strings.HasPrefix(lang, "go ") && lang != "golang" {
			continue
		}
		b := block{file: path, line: start + 1}
		if start > 0 {
			if m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[start-1])); m != nil {
				b.name = m[1]
			}
		}
		b.lines, err = dedent(body)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s:%d: %v", path, start+1, err))
		}
		blocks = append(blocks, b)
	}
	return blocks, errs, nil
}

// regions returns the regions of the Go files (not the tests) in dir, by
// snippet name: the regions of one name, in file order, joined with one
// blank line. A name's regions must all be in one file.
func regions(dir string) (map[string][]string, []string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	var (
		out    = map[string][]string{}
		fileOf = map[string]string{}
		errs   []string
	)
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(f)
		var (
			name  string // of the open region
			start int
			lines []string
			n     int
		)
		for sc.Scan() {
			n++
			line := sc.Text()
			switch {
			case startRE.MatchString(line):
				if name != "" {
					errs = append(errs, fmt.Sprintf("%s:%d: region %q starts inside region %q", file, n, startRE.FindStringSubmatch(line)[1], name))
				}
				name, start, lines = startRE.FindStringSubmatch(line)[1], n, nil
			case endRE.MatchString(line):
				if name == "" {
					errs = append(errs, fmt.Sprintf("%s:%d: end of a region that did not start", file, n))
					continue
				}
				if prev, ok := fileOf[name]; ok && prev != file {
					errs = append(errs, fmt.Sprintf("%s:%d: region %q is also in %s", file, start, name, prev))
				}
				fileOf[name] = file
				body, err := dedent(trimBlank(lines))
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s:%d: %v", file, start, err))
				}
				if len(body) == 0 {
					errs = append(errs, fmt.Sprintf("%s:%d: region %q is empty", file, start, name))
				}
				if out[name] != nil {
					out[name] = append(out[name], "")
				}
				out[name] = append(out[name], body...)
				name = ""
			case strings.HasPrefix(strings.TrimSpace(line), "// snippet") || strings.HasPrefix(strings.TrimSpace(line), "// end snippet"):
				errs = append(errs, fmt.Sprintf("%s:%d: malformed region line %q", file, n, strings.TrimSpace(line)))
			case name != "":
				lines = append(lines, line)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, err
		}
		if name != "" {
			errs = append(errs, fmt.Sprintf("%s:%d: region %q has no end", file, start, name))
		}
	}
	return out, errs, nil
}

// trimBlank drops the blank lines at the start and end of lines (gofmt
// puts one between an import declaration and the line after it).
func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// dedent removes the indentation common to the non-blank lines. Blank lines
// must be empty.
func dedent(lines []string) ([]string, error) {
	prefix, first := "", true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ind, false
			continue
		}
		for !strings.HasPrefix(ind, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			if l != "" {
				return nil, fmt.Errorf("line %d holds only white space", i+1)
			}
			continue
		}
		out[i] = l[len(prefix):]
	}
	return out, nil
}

// markdownFiles returns the Markdown files under root, relative to it and
// sorted: README.md, docs/*.md, each module's README.md and the rest. It
// skips hidden folders and testdata.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// programs returns the whole programs of this package's subfolders, by
// folder name: the file NAME/main.go, every line of it. A Go block that
// starts with a package clause is a whole program and must equal one,
// so that it compiles exactly as shown, with no name defined elsewhere.
func programs(dir string) (map[string][]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "main.go"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[e.Name()] = trimBlank(strings.Split(string(data), "\n"))
	}
	return out, nil
}

// isProgram reports whether a block is a whole program: its first line is
// a package clause.
func isProgram(lines []string) bool {
	lines = trimBlank(lines)
	return len(lines) > 0 && strings.HasPrefix(lines[0], "package ")
}

// TestReadmeSnippets checks that every Go block of every Markdown file of
// the repository is, line for line, a region of this package's code or, if
// it starts with a package clause, one of its whole programs
// (examples/readme/NAME/main.go); and that every region and program is in
// some Markdown file.
func TestReadmeSnippets(t *testing.T) {
	files, err := markdownFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var errs []string
	for _, f := range files {
		bs, es, err := readmeBlocks(filepath.Join(repoRoot, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		for i := range bs {
			bs[i].file = f
		}
		for _, e := range es {
			errs = append(errs, strings.TrimPrefix(filepath.ToSlash(e), repoRoot+"/"))
		}
		blocks = append(blocks, bs...)
	}
	regs, regErrs, err := regions(".")
	if err != nil {
		t.Fatal(err)
	}
	errs = append(errs, regErrs...)
	progs, err := programs(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		errs = append(errs, "no Markdown file has Go blocks")
	}

	seen := map[string]string{}
	var differ, missing []string
	for _, b := range blocks {
		at := fmt.Sprintf("%s:%d", b.file, b.line)
		if b.name == "" {
			errs = append(errs, fmt.Sprintf("%s: a ```go block without a <!-- snippet: NAME --> line before it", at))
			continue
		}
		if prev, ok := seen[b.name]; ok {
			errs = append(errs, fmt.Sprintf("%s: snippet %q is also at %s", at, b.name, prev))
			continue
		}
		seen[b.name] = at
		var want []string
		var ok bool
		where := fmt.Sprintf("region // snippet: %s ... // end snippet in examples/readme", b.name)
		if isProgram(b.lines) {
			want, ok = progs[b.name]
			where = fmt.Sprintf("program examples/readme/%s/main.go", b.name)
		} else {
			want, ok = regs[b.name]
		}
		if !ok {
			missing = append(missing, b.name)
			errs = append(errs, fmt.Sprintf("%s: snippet %q has no %s", at, b.name, where))
			continue
		}
		if d := diffLines(trimBlank(b.lines), want); d != "" {
			differ = append(differ, b.name)
			errs = append(errs, fmt.Sprintf("%s: snippet %q differs from its %s:\n%s", at, b.name, where, d))
		}
	}
	var orphans []string
	for name := range regs {
		if _, ok := seen[name]; !ok {
			orphans = append(orphans, "region "+name)
		}
	}
	for name := range progs {
		if _, ok := seen[name]; !ok {
			orphans = append(orphans, "program "+name)
		}
	}
	sort.Strings(orphans)
	for _, name := range orphans {
		errs = append(errs, fmt.Sprintf("%s is in no Markdown block (<!-- snippet: NAME -->)", name))
	}
	for _, e := range errs {
		t.Error(e)
	}
	if len(differ)+len(missing) > 0 {
		t.Errorf("snippets that differ: %q; snippets without code: %q", differ, missing)
	}
	t.Logf("%d Go blocks in %d Markdown files checked", len(blocks), len(files))
}

// diffLines describes the first difference between the README's lines and
// the code's, or returns "" when they are equal.
func diffLines(readme, code []string) string {
	for i := 0; i < len(readme) || i < len(code); i++ {
		switch {
		case i >= len(readme):
			return fmt.Sprintf("  line %d: the code has more lines: %q", i+1, code[i])
		case i >= len(code):
			return fmt.Sprintf("  line %d: the README has more lines: %q", i+1, readme[i])
		case readme[i] != code[i]:
			return fmt.Sprintf("  line %d:\n    README: %q\n    code:   %q", i+1, readme[i], code[i])
		}
	}
	return ""
}

// TestSnippetParser checks the checker on made-up inputs: a one-character
// change is a difference, an unmarked block and a stray region are errors.
func TestSnippetParser(t *testing.T) {
	dir := t.TempDir()
	readme := filepath.Join(dir, "README.md")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(readme, "text\n\n<!-- snippet: a -->\n```go\nimport \"fmt\"\n\nx := 1\nif x > 0 {\n\tfmt.Println(x)\n}\n```\n\n```go\ny := 2\n```\n\n<!-- snippet: b -->\n```sh\necho\n```\n")
	write(filepath.Join(dir, "a.go"), "package p\n\n// snippet: a\nimport \"fmt\"\n\n// end snippet\n\nfunc f() {\n\t// snippet: a\n\tx := 1\n\tif x > 0 {\n\t\tfmt.Println(x)\n\t}\n\t// end snippet\n\t// snippet: orphan\n\t_ = 0\n\t// end snippet\n}\n")

	blocks, errs, err := readmeBlocks(readme)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].name != "a" || blocks[1].name != "" {
		t.Fatalf("blocks = %+v", blocks)
	}
	if len(errs) != 1 || !strings.Contains(errs[0], `marker "b"`) {
		t.Errorf("errors = %q, want the marker before the sh block", errs)
	}
	regs, errs, err := regions(dir)
	if err != nil || len(errs) != 0 {
		t.Fatal(err, errs)
	}
	if d := diffLines(blocks[0].lines, regs["a"]); d != "" {
		t.Errorf("a differs:\n%s", d)
	}
	if _, ok := regs["orphan"]; !ok {
		t.Error("region orphan not found")
	}
	changed := append([]string(nil), blocks[0].lines...)
	changed[2] = "x := 2"
	if diffLines(changed, regs["a"]) == "" {
		t.Error("a one-character change is not a difference")
	}
	write(filepath.Join(dir, "b.go"), "package p\n\n// snippet: c\n")
	if _, errs, _ := regions(dir); len(errs) != 1 || !strings.Contains(errs[0], "has no end") {
		t.Errorf("errors = %q, want an unterminated region", errs)
	}
}

// TestProgramBlocks checks the checker on whole programs: a block that
// starts with a package clause is compared with NAME/main.go, whole, and a
// Markdown file anywhere under the root is found.
func TestProgramBlocks(t *testing.T) {
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
	prog := "package main\n\nfunc main() {}\n"
	write("docs/guide.md", "<!-- snippet: hello -->\n```go\n"+prog+"```\n")
	write("testdata/skipped.md", "```go\nx\n```\n")
	write(".hidden/skipped.md", "```go\nx\n```\n")
	write("readme/hello/main.go", prog)

	files, err := markdownFiles(root)
	if err != nil || !reflect.DeepEqual(files, []string{"docs/guide.md"}) {
		t.Fatalf("markdown files %q, %v; want docs/guide.md alone", files, err)
	}
	blocks, errs, err := readmeBlocks(filepath.Join(root, "docs", "guide.md"))
	if err != nil || len(errs) != 0 || len(blocks) != 1 || !isProgram(blocks[0].lines) {
		t.Fatalf("blocks %+v, errors %q, %v", blocks, errs, err)
	}
	progs, err := programs(filepath.Join(root, "readme"))
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLines(trimBlank(blocks[0].lines), progs["hello"]); d != "" {
		t.Errorf("the program differs from its block:\n%s", d)
	}
	write("readme/hello/main.go", "package main\n\nfunc main() { println() }\n")
	if progs, _ = programs(filepath.Join(root, "readme")); diffLines(trimBlank(blocks[0].lines), progs["hello"]) == "" {
		t.Error("a changed program is not a difference")
	}
	if isProgram([]string{"r.Use(x)"}) {
		t.Error("a fragment is taken for a program")
	}
}
