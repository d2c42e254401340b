package rules

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestLoadDirMergeDomains: with MergeDomains, the files of one domain are
// joined at the top level in file name order, and what two files both
// define at the top level is refused with both places named.
func TestLoadDirMergeDomains(t *testing.T) {
	const (
		a = "domain: d\ndescriptors:\n" +
			"  - key: path\n    value: /api/*\n    rate_limit: {name: api, unit: second, requests_per_unit: 1}\n" +
			"  - key: user\n    descriptors:\n      - key: plan\n        rate_limit: {name: user_plan, unit: second, requests_per_unit: 2}\n"
		b = "domain: d\ndescriptors:\n" +
			"  - key: path\n    value: /api/v1/*\n    rate_limit: {name: v1, unit: second, requests_per_unit: 3}\n" +
			"  - key: path\n    value: /admin\n    rate_limit: {name: admin, unit: second, requests_per_unit: 4}\n"
		other = "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {name: e, unit: second, requests_per_unit: 5}\n"
	)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), a)
	writeFile(t, filepath.Join(dir, "b.yaml"), b)
	writeFile(t, filepath.Join(dir, "e.yaml"), other)

	snap, err := LoadDir(dir, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		req    []algo.Entry
		want   string // rule name; "" for none
	}{
		// a.yaml's wildcard comes first in file order, as within one file.
		{"d", entries("path=/api/v1/x"), "api"},
		{"d", entries("path=/admin"), "admin"},
		{"d", entries("user=u1", "plan=pro"), "user_plan"},
		{"d", entries("path=/other"), ""},
		{"e", entries("k=x"), "e"},
	} {
		got := ""
		if r := snap.Match(tc.domain, tc.req); r != nil {
			got = r.Limits[0].Name
		}
		if got != tc.want {
			t.Errorf("%s %v: matched %q, want %q", tc.domain, tc.req, got, tc.want)
		}
	}
	if n := snap.NumRules(); n != 5 {
		t.Errorf("NumRules = %d, want 5", n)
	}

	// The same top-level key and value in two files, and the same bare key.
	writeFile(t, filepath.Join(dir, "c.yaml"), "domain: d\ndescriptors:\n  - key: path\n    value: /admin\n  - key: user\n")
	_, err = LoadDir(dir, Options{MergeDomains: true})
	c := filepath.Join(dir, "c.yaml")
	want := []string{
		c + `:3: descriptors: duplicate descriptor key "path" value "/admin" in domain "d" (first in ` + filepath.Join(dir, "b.yaml") +
			`:6; want each top-level key and value in one file of the domain)`,
		c + `:5: descriptors: duplicate descriptor key "user" in domain "d" (first in ` + filepath.Join(dir, "a.yaml") +
			`:6; want each top-level key and value in one file of the domain)`,
	}
	if got := errorLines(err); !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}
