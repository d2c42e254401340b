package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// rule is what a package doc says its package may import and who may
// import it. Module packages are named relative to the module path.
type rule struct {
	// allow lists the module packages its non-test code may import
	// directly; "*" allows every module package that is not test support.
	allow []string
	// stdlibOnly: its non-test code depends on the standard library only.
	stdlibOnly bool
	// forbid lists import-path prefixes that must not be among its
	// dependencies, direct or not (non-test code).
	forbid []string
	// forbidDirect lists import-path prefixes its own non-test files must
	// not import; a module package it imports may.
	forbidDirect []string
	// sealed: no package imports it, tests included.
	sealed bool
	// testAllow, when not nil, lists the module packages its _test.go
	// files may import; an entry ending in "*" is a prefix.
	testAllow []string
}

// goPackage is the part of `go list -json` output the rules read.
type goPackage struct {
	Dir          string
	ImportPath   string
	Standard     bool
	Module       *struct{ Path string }
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// TestImportRules checks every package of the module against its entry in
// moduleRules, with the dependency graph `go list -deps` reports.
func TestImportRules(t *testing.T) {
	t.Parallel()
	mod, _, pkgs := listModule(t)
	for _, v := range check(mod, pkgs, moduleRules) {
		t.Error(v)
	}
}

// TestDocRulesHaveEntries: a package whose doc states an import rule has an
// entry that enforces one, so a rule written in a doc cannot go unchecked.
func TestDocRulesHaveEntries(t *testing.T) {
	t.Parallel()
	mod, _, pkgs := listModule(t)
	importRule := regexp.MustCompile(`must (not|never) import|must import nothing|must not be imported|must not know|must not see`)
	imported := regexp.MustCompile(`must not be imported|must not import it`)
	for _, p := range pkgs {
		if !inModule(mod, p.ImportPath) {
			continue
		}
		doc := packageDoc(t, p)
		if !importRule.MatchString(doc) {
			continue
		}
		name := rel(mod, p.ImportPath)
		r, ok := moduleRules[name]
		if !ok {
			continue // TestImportRules names it
		}
		if slices.Contains(r.allow, "*") {
			t.Errorf("%s: its doc states an import rule, but its entry in test/arch/rules_test.go allows every package", name)
		}
		if imported.MatchString(doc) && !isTestKit(name) && !r.sealed {
			t.Errorf("%s: its doc says it must not be imported, but it is neither under %s nor sealed in test/arch/rules_test.go", name, testKit)
		}
	}
}

// listModule runs `go list -deps -json ./...` at the module root and
// returns the module path, the root directory and every package listed.
func listModule(t *testing.T) (mod, dir string, pkgs []goPackage) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	mod, dir, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if !ok {
		t.Fatalf("go list -m printed %q, want path and directory", out)
	}
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v\n%s", err, stderr.Bytes())
	}
	pkgs, err = decodePackages(out)
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v", err)
	}
	return mod, dir, pkgs
}

func decodePackages(out []byte) ([]goPackage, error) {
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return pkgs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding package %d: %w", len(pkgs)+1, err)
		}
		pkgs = append(pkgs, p)
	}
}

// packageDoc returns the package comments of p's files, tests included
// (test/e2e keeps its doc in a _test.go file).
func packageDoc(t *testing.T, p goPackage) string {
	t.Helper()
	var doc strings.Builder
	files := slices.Concat(p.GoFiles, p.TestGoFiles, p.XTestGoFiles)
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil,
			parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatalf("%s: %v", p.ImportPath, err)
		}
		if parsed.Doc != nil {
			doc.WriteString(parsed.Doc.Text())
		}
	}
	// A rule may be wrapped across lines.
	return strings.Join(strings.Fields(doc.String()), " ")
}

// check returns one message per broken rule, each naming the package and
// what it must not import, sorted.
func check(mod string, pkgs []goPackage, rules map[string]rule) []string {
	standard := map[string]bool{}
	for _, p := range pkgs {
		standard[p.ImportPath] = p.Standard
	}
	var out []string
	for _, p := range pkgs {
		if !inModule(mod, p.ImportPath) {
			continue
		}
		name := rel(mod, p.ImportPath)
		r, ok := rules[name]
		if !ok {
			out = append(out, fmt.Sprintf("%s has no entry in test/arch/rules_test.go: add it there with the import rules its package doc states", name))
			continue
		}
		out = append(out, checkImports(mod, name, p, r, rules)...)
		out = append(out, checkDeps(name, p, r, standard)...)
		out = append(out, checkTests(mod, name, p, r, rules)...)
	}
	slices.Sort(out)
	return out
}

// checkImports checks the module packages name's non-test files import.
func checkImports(mod, name string, p goPackage, r rule, rules map[string]rule) []string {
	var out []string
	for _, imp := range p.Imports {
		for _, prefix := range r.forbidDirect {
			if strings.HasPrefix(imp, prefix) {
				out = append(out, fmt.Sprintf("%s imports %s, which its package doc forbids", name, imp))
			}
		}
		if !inModule(mod, imp) {
			continue
		}
		dep := rel(mod, imp)
		target := rules[dep]
		switch {
		case target.sealed:
			out = append(out, fmt.Sprintf("%s imports %s, which no package may import", name, dep))
		case isTestKit(dep) && !isTestKit(name) && !strings.HasPrefix(name, "test/"):
			out = append(out, fmt.Sprintf("%s imports %s, which is test support: only _test.go files, test support and test/ may import it", name, dep))
		case !slices.Contains(r.allow, dep) && !slices.Contains(r.allow, "*"):
			out = append(out, fmt.Sprintf("%s imports %s, which its allow-list in test/arch/rules_test.go does not allow", name, dep))
		}
	}
	return out
}

// checkDeps checks name's dependencies, direct or not, against stdlibOnly
// and forbid.
func checkDeps(name string, p goPackage, r rule, standard map[string]bool) []string {
	var out []string
	for _, dep := range p.Deps {
		if r.stdlibOnly && !standard[dep] {
			out = append(out, fmt.Sprintf("%s depends on %s, but its package doc allows the standard library only", name, dep))
		}
		for _, prefix := range r.forbid {
			if strings.HasPrefix(dep, prefix) {
				out = append(out, fmt.Sprintf("%s depends on %s, which its package doc forbids", name, dep))
				break
			}
		}
	}
	return out
}

// checkTests checks the module packages name's _test.go files import.
func checkTests(mod, name string, p goPackage, r rule, rules map[string]rule) []string {
	var out []string
	for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
		if !inModule(mod, imp) || imp == p.ImportPath {
			continue
		}
		dep := rel(mod, imp)
		if rules[dep].sealed {
			out = append(out, fmt.Sprintf("%s's tests import %s, which no package may import", name, dep))
		} else if r.testAllow != nil && !allowed(r.testAllow, dep) {
			out = append(out, fmt.Sprintf("%s's tests import %s, which its test allow-list in test/arch/rules_test.go does not allow", name, dep))
		}
	}
	return out
}

// isTestKit: name (relative to the module) is test support.
func isTestKit(name string) bool { return strings.HasPrefix(name, testKit) }

// allowed: dep is in list, exactly or under an entry ending in "*".
func allowed(list []string, dep string) bool {
	for _, a := range list {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(dep, prefix) || a == dep {
			return true
		}
	}
	return false
}

func inModule(mod, path string) bool {
	return path == mod || strings.HasPrefix(path, mod+"/")
}

func rel(mod, path string) string {
	if path == mod {
		return "."
	}
	return strings.TrimPrefix(path, mod+"/")
}

// TestReadmeMapsEveryPackage: the package map of docs/development.md has a
// line for every package of the module, so a new package cannot go
// unmentioned there.
func TestReadmeMapsEveryPackage(t *testing.T) {
	t.Parallel()
	mod, dir, pkgs := listModule(t)
	readme, err := os.ReadFile(filepath.Join(dir, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	mapped := map[string]bool{}
	for line := range strings.Lines(string(readme)) {
		if f := strings.Fields(line); len(f) > 1 {
			mapped[f[0]] = true
		}
	}
	packages := map[string]bool{}
	for _, p := range pkgs {
		name := rel(mod, p.ImportPath)
		if !inModule(mod, p.ImportPath) {
			continue
		}
		packages[name] = true
		if !mapped[name] {
			t.Errorf("%s has no line in the package map of docs/development.md: add one saying what it does", name)
		}
	}
	// And the other way: a line that names a package names one that is
	// there, so a package that moves (into the test kit, say) cannot leave
	// its old name behind. docs/architecture.md's package lists (its
	// layers and the command line's) are held to the tree the same way.
	packagePath := regexp.MustCompile(`^(cmd|pkg|internal|test|examples)/[\w./-]+$`)
	for name := range mapped {
		if packagePath.MatchString(name) && !packages[name] {
			t.Errorf("docs/development.md's package map names %s, which is no package of the module", name)
		}
	}
	design, err := os.ReadFile(filepath.Join(dir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(design)) {
		if f := strings.Fields(line); len(f) > 1 && packagePath.MatchString(f[0]) && !packages[f[0]] {
			t.Errorf("docs/architecture.md's line %q names %s, which is no package of the module", strings.TrimSpace(line), f[0])
		}
	}
}
