// Command release releases the repository's modules together, under one
// version, and rehearses that release before it happens.
//
// The repository holds many modules (the root, each adapter, each store,
// the observers, the command, the examples), listed in go.work. A user
// requires some of them from the module proxy, so each module's go.mod
// requires the others at a real version and replaces none of them:
// development stays local through go.work alone, which replaces each
// module at that version by its folder (the go command reads the go.mod of
// a required version even when the workspace holds the module). The file
// VERSION at the
// root holds the version that every module requires of the others, which
// is the version the next release tags.
//
// Usage, from the repository's root:
//
//	go run ./internal/release check            # go.mod and go.work agree with VERSION
//	go run ./internal/release set v0.2.0       # VERSION, go.work and every requirement to v0.2.0
//	go run ./internal/release tag              # tag every module at VERSION, in dependency order
//	go run ./internal/release proxy -dir DIR   # a file GOPROXY of the working tree at VERSION
//	go run ./internal/release rehearse         # that proxy, and a newcomer installing from it
//
// A release is: update CHANGELOG.md, `set` the new version, commit, `tag`,
// and push the commit and the tags it prints. `tag` refuses a dirty tree,
// go.mod files that disagree with VERSION, and a CHANGELOG.md without a
// section for the version. Tags go in dependency order (the root's vX.Y.Z
// first, then gin/vX.Y.Z and the others, each after what it requires), so
// that a proxy asked for a module can always find what it requires.
//
// rehearse publishes every module of the working tree at VERSION into a
// file-based proxy, then plays a newcomer in fresh modules outside the
// workspace (GOWORK=off, no replace): it runs every install line of
// README.md (each `go get` and `go install` of this repository's modules in
// its shell blocks), builds every whole program of the Markdown files (a Go
// block that starts with a package clause), and runs each quick start
// (a program named quickstart-STACK, one per supported stack): it must
// admit 100 requests from one client and answer the 101st with 429 and
// Retry-After. It needs the go command and the module proxy the machine
// is set up with, for third-party modules.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// semverRE is the form of a release version this tool accepts.
var semverRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: go run ./internal/release check | set VERSION | tag | proxy -dir DIR | rehearse [-keep]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	switch args[0] {
	case "check":
		_, _, err := checked(root)
		if err == nil {
			fmt.Println("release: every module requires the others at the version in VERSION and replaces none; go.work replaces each at that version by its folder")
		}
		return err
	case "set":
		if len(args) != 2 {
			return usage()
		}
		return setVersion(root, args[1])
	case "tag":
		return tag(root)
	case "proxy":
		fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
		dir := fs.String("dir", "", "the folder to write the proxy in")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *dir == "" {
			return usage()
		}
		version, err := readVersion(root)
		if err != nil {
			return err
		}
		mods, err := modules(root)
		if err != nil {
			return err
		}
		if err := writeProxy(root, *dir, version, mods, time.Now()); err != nil {
			return err
		}
		fmt.Printf("release: %d modules at %s in %s (GOPROXY=file://%s)\n", len(mods), version, *dir, *dir)
		return nil
	case "rehearse":
		fs := flag.NewFlagSet("rehearse", flag.ContinueOnError)
		keep := fs.Bool("keep", false, "keep the proxy and the newcomer modules (their folder is printed)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return rehearse(root, *keep)
	}
	return usage()
}

// repoRoot is the folder of go.work, from the current folder up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work here or above: run from the repository")
		}
		dir = parent
	}
}

// readVersion reads the file VERSION at root.
func readVersion(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(data))
	if !semverRE.MatchString(v) {
		return "", fmt.Errorf("VERSION holds %q, not a version such as v0.1.0", v)
	}
	return v, nil
}

// checked reads VERSION and the modules, and fails with every fault when a
// go.mod requires another version of a module of the repository or
// replaces one.
func checked(root string) (string, []module, error) {
	version, err := readVersion(root)
	if err != nil {
		return "", nil, err
	}
	mods, err := modules(root)
	if err != nil {
		return "", nil, err
	}
	work, err := readWork(root)
	if err != nil {
		return "", nil, err
	}
	faults := append(consistent(mods, version), workFaults(work, mods, version)...)
	if len(faults) > 0 {
		return version, mods, fmt.Errorf("go.mod files or go.work disagree with VERSION (%s):\n  %s", version, strings.Join(faults, "\n  "))
	}
	return version, mods, nil
}

// setVersion writes version to VERSION and makes every module require the
// others at it, dropping replace directives for them.
func setVersion(root, version string) error {
	if !semverRE.MatchString(version) {
		return fmt.Errorf("%q is not a version such as v0.1.0", version)
	}
	mods, err := modules(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		var edits []string
		for p := range m.Requires {
			edits = append(edits, "-require="+p+"@"+version)
		}
		for _, p := range m.Replaces {
			if p == rootPath || strings.HasPrefix(p, rootPath+"/") {
				edits = append(edits, "-dropreplace="+p)
			}
		}
		if len(edits) == 0 {
			continue
		}
		cmd := exec.Command("go", append(append([]string{"mod", "edit"}, edits...), "go.mod")...)
		cmd.Dir = filepath.Join(root, m.Dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s/go.mod: %w", m.Dir, err)
		}
	}
	// go.work replaces each module at the new version by its folder, and no
	// longer at the old one.
	work, err := readWork(root)
	if err != nil {
		return err
	}
	var edits []string
	for _, r := range work.Replace {
		if r.Old.Path == rootPath || strings.HasPrefix(r.Old.Path, rootPath+"/") {
			old := r.Old.Path
			if r.Old.Version != "" {
				old += "@" + r.Old.Version
			}
			edits = append(edits, "-dropreplace="+old)
		}
	}
	for _, m := range mods {
		edits = append(edits, "-replace="+m.Path+"@"+version+"=./"+filepath.ToSlash(m.Dir))
	}
	cmd := exec.Command("go", append(append([]string{"work", "edit"}, edits...), "go.work")...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go.work: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "VERSION"), []byte(version+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("release: VERSION, go.work and %d go.mod files at %s; add its section to CHANGELOG.md, commit, then run tag\n", len(mods), version)
	return nil
}

// tag tags every module at VERSION, in dependency order, after checking
// that the tree is clean, the go.mod files agree, and CHANGELOG.md has the
// version's section.
func tag(root string) error {
	version, mods, err := checked(root)
	if err != nil {
		return err
	}
	status, err := git(root, "status", "--porcelain")
	if err != nil {
		return err
	}
	if strings.TrimSpace(status) != "" {
		return fmt.Errorf("the tree has changes not committed:\n%s", status)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`(?m)^## \[?` + regexp.QuoteMeta(version) + `\b`).Match(changelog) {
		return fmt.Errorf("CHANGELOG.md has no section \"## %s\"", version)
	}
	var tags []string
	for _, m := range mods {
		t := m.Prefix() + version
		if _, err := git(root, "tag", "-a", t, "-m", m.Path+" "+version); err != nil {
			return fmt.Errorf("tagging %s: %w (tags made so far: %s)", t, err, strings.Join(tags, " "))
		}
		tags = append(tags, t)
	}
	fmt.Printf("release: tagged %d modules at %s, in dependency order. Push the commit, then the tags in this order:\n  git push origin HEAD %s\n", len(tags), version, strings.Join(tags, " "))
	return nil
}

// git runs git in dir and returns what it printed.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
