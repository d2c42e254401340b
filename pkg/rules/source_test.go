package rules

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestSourceOfFileDomains: each domain records the file it came from (a
// merged domain its first file), and /debug/config's dump shows it.
func TestSourceOfFileDomains(t *testing.T) {
	const rule = "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: d\n"+rule)
	writeFile(t, filepath.Join(dir, "b.yaml"), "domain: d\ndescriptors:\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, "e.yaml"), "domain: e\n"+rule)
	snap, err := LoadDir(dir, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		want   Source
		ok     bool
	}{
		{"d", Source{Type: SourceFile, Name: filepath.Join(dir, "a.yaml")}, true},
		{"e", Source{Type: SourceFile, Name: filepath.Join(dir, "e.yaml")}, true},
		{"unknown", Source{}, false},
	} {
		if got, ok := snap.Source(tc.domain); got != tc.want || ok != tc.ok {
			t.Errorf("Source(%q) = %+v, %v; want %+v, %v", tc.domain, got, ok, tc.want, tc.ok)
		}
	}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var dump struct {
		Domains []struct{ Source Source }
	}
	if err := json.Unmarshal(data, &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump.Domains) != 2 || dump.Domains[1].Source.Name != filepath.Join(dir, "e.yaml") {
		t.Errorf("dump sources %+v, want each domain's file", dump.Domains)
	}
	if s := (Source{Type: SourceXDS, Name: "r", Version: "v2"}).String(); s != "xds:r@v2" {
		t.Errorf("String() = %q, want xds:r@v2", s)
	}
}
