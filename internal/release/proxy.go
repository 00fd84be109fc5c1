package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

// writeProxy writes a module proxy in the folder dir (served as
// GOPROXY=file://dir) that holds every module of mods at version, made of
// the files of the working tree at root that git tracks or would track
// (committed, or new and not ignored), as a tag of that tree would publish
// them.
func writeProxy(root, dir, version string, mods []module, now time.Time) error {
	files, err := treeFiles(root)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if err := writeModule(root, dir, version, m, mods, files, now); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	return nil
}

// treeFiles lists the files of the working tree at root, slash-separated
// and relative to it.
func treeFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the files of %s: %w", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		// A file deleted but not yet staged is listed and absent.
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			continue
		}
		files = append(files, f)
	}
	sort.Strings(files)
	return files, nil
}

// moduleFiles returns the files of files that belong to m: under its
// folder and not under the folder of another module nested in it.
func moduleFiles(m module, mods []module, files []string) []string {
	prefix := m.Prefix()
	var nested []string
	for _, o := range mods {
		if o.Path != m.Path && strings.HasPrefix(o.Prefix(), prefix) {
			nested = append(nested, o.Prefix())
		}
	}
	var out []string
next:
	for _, f := range files {
		if !strings.HasPrefix(f, prefix) {
			continue
		}
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue next
			}
		}
		rel := strings.TrimPrefix(f, prefix)
		// What the go command leaves out of a module zip: vendor folders
		// (but for a module's own vendor/modules.txt), and version control.
		if strings.HasPrefix(rel, "vendor/") || strings.Contains(rel, "/vendor/") || strings.HasPrefix(rel, ".git/") {
			continue
		}
		out = append(out, rel)
	}
	return out
}

// writeModule writes m's list, .info, .mod and .zip files.
func writeModule(root, dir, version string, m module, mods []module, files []string, now time.Time) error {
	escaped, err := escapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{version, now.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := addToList(filepath.Join(vdir, "list"), version); err != nil {
		return err
	}

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefix := m.Path + "@" + version + "/"
	for _, rel := range moduleFiles(m, mods, files) {
		src := filepath.Join(root, filepath.FromSlash(m.Prefix()+rel))
		st, err := os.Lstat(src)
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			continue // the go command leaves out symbolic links and the like
		}
		w, err := zw.Create(prefix + rel)
		if err != nil {
			return err
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vdir, version+".zip"), buf.Bytes(), 0o644)
}

// addToList adds version to the proxy's list file of a module, once.
func addToList(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	lines := strings.Fields(string(data))
	for _, l := range lines {
		if l == version {
			return nil
		}
	}
	lines = append(lines, version)
	return os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// escapePath escapes a module path as the module proxy protocol does: each
// upper-case letter becomes '!' and its lower case.
func escapePath(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= unicode.MaxASCII:
			return "", fmt.Errorf("module path %q: character %q cannot be escaped", p, r)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	if path.Clean(p) != p {
		return "", fmt.Errorf("module path %q is not clean", p)
	}
	return b.String(), nil
}
