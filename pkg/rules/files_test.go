package rules

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// domainRules is a rule file of domain d with one limit.
func domainRules(d string) string {
	return "domain: " + d + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

// symlink makes link point at target, failing t otherwise.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// loadedDomains loads dir under layout and returns its domains, sorted,
// with the warnings given.
func loadedDomains(t *testing.T, dir string, layout FileLayout) ([]string, []string, error) {
	t.Helper()
	var warnings []string
	snap, err := LoadDir(dir, Options{Files: layout, Warn: func(e *Error) { warnings = append(warnings, e.Error()) }})
	if err != nil {
		return nil, warnings, err
	}
	var names []string
	for _, d := range snap.Domains() {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names, warnings, nil
}

// TestFileLayouts: envoy-rls's own layout reads *.yaml and *.yml files of
// the directory; the reference's reads every file under it, whatever its
// name, skipping dotfiles unless DotFiles, and Kubernetes' ".." entries
// always.
func TestFileLayouts(t *testing.T) {
	dir := t.TempDir()
	for name, domain := range map[string]string{
		"top.yaml":            "top",
		"noext":               "noext",
		"sub/nested.conf":     "nested",
		"sub/deeper/deep.yml": "deep",
		".hidden":             "hidden",
		".dotdir/dotted.yaml": "dotted",
		"..2026_01_01/cm":     "cm",
	} {
		writeFile(t, filepath.Join(dir, name), domainRules(domain))
	}
	symlink(t, "..2026_01_01", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "cm"), filepath.Join(dir, "cm"))

	tests := []struct {
		name   string
		layout FileLayout
		want   []string
	}{
		{"own", FileLayout{}, []string{"top"}},
		{"reference, dotfiles ignored", FileLayout{Reference: true}, []string{"cm", "deep", "nested", "noext", "top"}},
		{"reference, dotfiles read", FileLayout{Reference: true, DotFiles: true}, []string{"cm", "deep", "dotted", "hidden", "nested", "noext", "top"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings, err := loadedDomains(t, dir, tt.layout)
			if err != nil {
				t.Fatalf("LoadDir: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("domains %v, want %v", got, tt.want)
			}
			if len(warnings) > 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
		})
	}
}

// TestReferenceLayoutSymlinks: a directory reached through a symlink is
// read; a symlinked directory inside it is not entered, and says so.
func TestReferenceLayoutSymlinks(t *testing.T) {
	real := t.TempDir()
	writeFile(t, filepath.Join(real, "config", "a"), domainRules("a"))
	writeFile(t, filepath.Join(real, "elsewhere", "b"), domainRules("b"))
	symlink(t, filepath.Join(real, "elsewhere"), filepath.Join(real, "config", "linked"))
	link := filepath.Join(t.TempDir(), "config")
	symlink(t, filepath.Join(real, "config"), link)

	got, warnings, err := loadedDomains(t, link, FileLayout{Reference: true})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if !slices.Equal(got, []string{"a"}) {
		t.Errorf("domains %v, want [a]", got)
	}
	want := filepath.Join(link, "linked") + ": a symlink to a directory, not read"
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("warnings %q, want one starting %q", warnings, want)
	}
}

// TestReferenceLayoutErrors: an empty tree and a missing directory are
// refused with what was looked for; a file that is not a rule file is
// refused by name.
func TestReferenceLayoutErrors(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, ".only-hidden"), domainRules("h"))
	bad := t.TempDir()
	writeFile(t, filepath.Join(bad, "sub", "README"), "not a rule file\n")
	tests := []struct {
		name, dir, want string
	}{
		{"empty", empty, "rules: no rule files in " + empty + " (read: every file under the directory, subdirectories included, dotfiles skipped"},
		{"missing", filepath.Join(empty, "nope"), "rules: read directory:"},
		{"not rules", bad, filepath.Join(bad, "sub", "README") + ":1: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Validate(tt.dir, Options{Files: FileLayout{Reference: true}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestZeroMissingRequestsPerUnit: without the option a rate limit lacking
// requests_per_unit is refused; with it, it is a limit of 0 and a warning
// names the file and line.
func TestZeroMissingRequestsPerUnit(t *testing.T) {
	const file = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n"
	if _, err := Parse("r.yaml", []byte(file), Options{}); err == nil || !strings.Contains(err.Error(), "r.yaml:5: descriptors[0].rate_limit.requests_per_unit: missing") {
		t.Errorf("Parse without the option: %v, want the missing field refused", err)
	}
	var warnings []string
	d, err := Parse("r.yaml", []byte(file), Options{ZeroMissingRequestsPerUnit: true, Warn: func(e *Error) { warnings = append(warnings, e.Error()) }})
	if err != nil {
		t.Fatalf("Parse with the option: %v", err)
	}
	if l := d.Rules()[0].Limits[0]; l.RequestsPerUnit != 0 || l.Policy.Limit != 0 {
		t.Errorf("limit %+v, want requests_per_unit 0", l)
	}
	want := "r.yaml:5: descriptors[0].rate_limit.requests_per_unit: missing, read as 0"
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("warnings %q, want one starting %q", warnings, want)
	}
}

// TestWatchSubdirectories: under the reference's layout a change in a
// subdirectory, one created after the start included, is reloaded.
func TestWatchSubdirectories(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sub", "a"), domainRules("a"))
	w := startLoaderWith(t, dir, Options{Files: FileLayout{Reference: true}})
	// A change at the top, seen once the watch runs; only then is a
	// change below it one that the watch (and not Run's first read) sees.
	writeFile(t, filepath.Join(dir, "top"), domainRules("top"))
	w.until("domain top", func(s *Snapshot) bool { return len(s.Domains()) == 2 })
	writeFile(t, filepath.Join(dir, "sub", "b"), domainRules("b"))
	w.until("domain b from sub/b", func(s *Snapshot) bool { return len(s.Domains()) == 3 })
	if err := os.MkdirAll(filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "new", "c"), domainRules("c"))
	w.until("domain c from new/c", func(s *Snapshot) bool { return len(s.Domains()) == 4 })
}
