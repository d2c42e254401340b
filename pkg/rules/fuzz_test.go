package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// FuzzParse feeds arbitrary files to the parser: it must never panic, every
// problem must name the file, and whatever it accepts must be matchable,
// dumpable and valid for the algorithms.
func FuzzParse(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "..", "examples", "config", "*.yaml"))
	for _, path := range examples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		matchConfig,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: mins, requests_per_unit: -1}\n",
		"domain: d\ndescriptors: [{key: a, value: 'x*', share_threshold: true, hash_tag: a, rate_limits: [{unit: second, requests_per_unit: 1}]}]\n",
		"domain: d\ndescriptors: &x [{key: a, descriptors: *x}]\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: day, requests_per_unit: 1}\n  - key: b\n    rate_limit: {<<: *r, name: n, replaces: [{name: m}]}\n",
		"{",
		"",
	} {
		f.Add([]byte(s))
	}
	probes := [][]algo.Entry{
		entries("k=v"), entries("a=x1"), entries("a=", "b=c"), entries("key1=value1", "subkey1=s"),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("fuzz.yaml", data, Options{})
		if err != nil {
			if d != nil {
				t.Fatalf("Parse returned both a domain and an error")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml") {
					t.Fatalf("problem without the file name: %q", line)
				}
			}
			return
		}
		s, err := NewSnapshot(d)
		if err != nil {
			t.Fatalf("NewSnapshot of one domain: %v", err)
		}
		for _, r := range d.Rules() {
			for _, l := range r.Limits {
				if err := l.Policy.Validate(); err != nil {
					t.Fatalf("accepted an invalid policy %+v: %v", l.Policy, err)
				}
			}
			if r.HashTag < -1 || r.HashTag >= r.depth {
				t.Fatalf("hash tag %d outside the rule's %d levels (%s)", r.HashTag, r.depth, r.Path)
			}
		}
		for _, p := range probes {
			if r := s.Match(d.Name, p); r != nil {
				r.KeyEntries(p, nil)
			}
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
	})
}
