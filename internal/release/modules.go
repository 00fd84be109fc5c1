package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// rootPath is the module path of the repository's root module; every
// other module of the repository has a path under it.
const rootPath = "github.com/ratekit/ratekit"

// A module is one module of the repository.
type module struct {
	Path string // module path, e.g. github.com/ratekit/ratekit/gin
	Dir  string // its folder, relative to the repository's root ("." for the root)

	// Requires holds the versions it requires of the repository's other
	// modules, by module path.
	Requires map[string]string
	// Replaces lists the module paths its go.mod replaces.
	Replaces []string
}

// Prefix is the module's tag prefix: "" for the root, "gin/" for gin.
func (m module) Prefix() string {
	if m.Dir == "." {
		return ""
	}
	return filepath.ToSlash(m.Dir) + "/"
}

// goModJSON is the part of `go mod edit -json` this tool reads.
type goModJSON struct {
	Module struct {
		Path string
	}
	Require []struct {
		Path    string
		Version string
	}
	Replace []struct {
		Old struct {
			Path string
		}
	}
}

// modules returns the repository's modules: those go.work uses, in
// dependency order (a module after every module it requires), ties broken
// by path.
func modules(root string) ([]module, error) {
	dirs, err := workspaceDirs(root)
	if err != nil {
		return nil, err
	}
	var mods []module
	for _, dir := range dirs {
		m, err := readModule(root, dir)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	return dependencyOrder(mods)
}

// goWork is the part of `go work edit -json` this tool reads.
type goWork struct {
	Use     []struct{ DiskPath string }
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path string }
	}
}

// readWork reads go.work at root.
func readWork(root string) (goWork, error) {
	var work goWork
	cmd := exec.Command("go", "work", "edit", "-json", "go.work")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return work, fmt.Errorf("reading go.work in %s: %w", root, err)
	}
	if err := json.Unmarshal(out, &work); err != nil {
		return work, fmt.Errorf("go.work: %w", err)
	}
	return work, nil
}

// workFaults checks that go.work replaces every module of mods, at
// version, by its own folder: the go command reads the go.mod of a
// required version even when the workspace holds the module, so without
// these lines the workspace would ask the module proxy for a version not
// yet published.
func workFaults(work goWork, mods []module, version string) []string {
	have := map[string]string{}
	for _, r := range work.Replace {
		have[r.Old.Path+"@"+r.Old.Version] = filepath.Clean(filepath.FromSlash(r.New.Path))
	}
	var faults []string
	for _, m := range mods {
		dir, ok := have[m.Path+"@"+version]
		switch {
		case !ok:
			faults = append(faults, fmt.Sprintf("go.work does not replace %s %s by its folder %s (run: go run ./internal/release set %s)", m.Path, version, filepath.ToSlash(m.Dir), version))
		case dir != m.Dir:
			faults = append(faults, fmt.Sprintf("go.work replaces %s %s by %s, not by its folder %s", m.Path, version, filepath.ToSlash(dir), filepath.ToSlash(m.Dir)))
		}
	}
	return faults
}

// workspaceDirs reads the folders of go.work's use directives.
func workspaceDirs(root string) ([]string, error) {
	work, err := readWork(root)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range work.Use {
		dirs = append(dirs, filepath.Clean(filepath.FromSlash(u.DiskPath)))
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("go.work in %s uses no module", root)
	}
	return dirs, nil
}

// readModule reads the go.mod in dir.
func readModule(root, dir string) (module, error) {
	cmd := exec.Command("go", "mod", "edit", "-json", filepath.Join(dir, "go.mod"))
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return module{}, fmt.Errorf("reading %s/go.mod: %w", dir, err)
	}
	var mod goModJSON
	if err := json.Unmarshal(out, &mod); err != nil {
		return module{}, fmt.Errorf("%s/go.mod: %w", dir, err)
	}
	m := module{Path: mod.Module.Path, Dir: dir, Requires: map[string]string{}}
	if m.Path != rootPath && !strings.HasPrefix(m.Path, rootPath+"/") {
		return module{}, fmt.Errorf("%s/go.mod: module %s is not under %s", dir, m.Path, rootPath)
	}
	if want := strings.TrimSuffix(rootPath+"/"+filepath.ToSlash(dir), "/."); m.Path != want {
		return module{}, fmt.Errorf("%s/go.mod: module %s, want %s (a module's path is its folder's)", dir, m.Path, want)
	}
	for _, r := range mod.Require {
		if r.Path == rootPath || strings.HasPrefix(r.Path, rootPath+"/") {
			m.Requires[r.Path] = r.Version
		}
	}
	for _, r := range mod.Replace {
		m.Replaces = append(m.Replaces, r.Old.Path)
	}
	return m, nil
}

// dependencyOrder sorts mods so that each comes after the modules it
// requires; a requirement outside mods, or a cycle, is an error.
func dependencyOrder(mods []module) ([]module, error) {
	byPath := map[string]module{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	var (
		out   []module
		state = map[string]int{} // 1 visiting, 2 done
		visit func(m module, from string) error
	)
	visit = func(m module, from string) error {
		switch state[m.Path] {
		case 1:
			return fmt.Errorf("modules require each other in a cycle through %s and %s", from, m.Path)
		case 2:
			return nil
		}
		state[m.Path] = 1
		deps := make([]string, 0, len(m.Requires))
		for p := range m.Requires {
			deps = append(deps, p)
		}
		sort.Strings(deps)
		for _, p := range deps {
			dep, ok := byPath[p]
			if !ok {
				return fmt.Errorf("%s requires %s, which go.work does not use", m.Path, p)
			}
			if err := visit(dep, m.Path); err != nil {
				return err
			}
		}
		state[m.Path] = 2
		out = append(out, m)
		return nil
	}
	for _, m := range mods {
		if err := visit(m, ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// consistent checks that every module requires the repository's other
// modules at version and replaces none of them: what a user's go command
// reads of a published go.mod. It returns one error line per fault.
func consistent(mods []module, version string) []string {
	var faults []string
	for _, m := range mods {
		deps := make([]string, 0, len(m.Requires))
		for p := range m.Requires {
			deps = append(deps, p)
		}
		sort.Strings(deps)
		for _, p := range deps {
			if v := m.Requires[p]; v != version {
				faults = append(faults, fmt.Sprintf("%s/go.mod requires %s %s, not %s", m.Dir, p, v, version))
			}
		}
		for _, p := range m.Replaces {
			faults = append(faults, fmt.Sprintf("%s/go.mod replaces %s: go install refuses such a module, and the workspace (go.work) already builds the local copy", m.Dir, p))
		}
	}
	return faults
}
