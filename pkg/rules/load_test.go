package rules

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const goodRules = "domain: good\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"

// A directory with three different mistakes reports all three, each with its
// file, line and YAML path.
func TestLoadDirReportsEveryMistake(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), goodRules)
	writeFile(t, filepath.Join(dir, "unit.yaml"), "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: mins, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, "field.yml"), "domain: two\ndescriptors:\n  - key: k\n    shadow: true\n")
	writeFile(t, filepath.Join(dir, "zdup.yaml"), "# again\ndomain: good\n")
	want := []string{
		filepath.Join(dir, "zdup.yaml") + `:2: domain: duplicate domain "good" (first in ` + filepath.Join(dir, "good.yaml") + `:1; want each domain in one file, or --merge-domain-config)`,
		filepath.Join(dir, "field.yml") + `:4: descriptors[0].shadow: unknown field (want one of key|value|rate_limit|rate_limits|descriptors|shadow_mode|quota_mode|detailed_metric|value_to_metric|share_threshold|hash_tag|metadata)`,
		filepath.Join(dir, "unit.yaml") + `:4: descriptors[0].rate_limit.unit: unknown unit "mins" (want second|minute|hour|day|week|month|year)`,
	}
	sort.Strings(want)

	snap, err := LoadDir(dir, Options{})
	if snap != nil {
		t.Errorf("LoadDir returned a snapshot despite errors")
	}
	if got := errorLines(err); !reflect.DeepEqual(got, want) {
		t.Errorf("LoadDir errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
	summary, err := Validate(dir, Options{})
	if summary != "" || !reflect.DeepEqual(errorLines(err), want) {
		t.Errorf("Validate = %q, %v; want no summary and the same three errors", summary, err)
	}
}

func TestLoadDirLayout(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), goodRules)
	writeFile(t, filepath.Join(dir, "b.YML"), "domain: upper\n")
	writeFile(t, filepath.Join(elsewhere, "real.yaml"), "domain: linked\ndescriptors: [{key: k, rate_limit: {unlimited: true}}]\n")
	if err := os.Symlink(filepath.Join(elsewhere, "real.yaml"), filepath.Join(dir, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	// Ignored: hidden entries, other extensions, subdirectories.
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "not: [valid")
	writeFile(t, filepath.Join(dir, "README.md"), "not: [valid")
	writeFile(t, filepath.Join(dir, "sub", "c.yaml"), "not: [valid")
	writeFile(t, filepath.Join(dir, "..2026_11_29_10_00_00.1", "x.yaml"), "not: [valid")
	if err := os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}

	snap, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	var names []string
	for _, d := range snap.Domains() {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"good", "linked", "upper"}) {
		t.Errorf("domains = %q, want [good linked upper]", names)
	}
	summary, err := Validate(dir, Options{})
	if err != nil || summary != "3 domains, 2 rules, 1 limit OK" {
		t.Errorf("Validate = %q, %v; want 3 domains, 2 rules, 1 limit OK", summary, err)
	}
}

func TestValidateDirectoryProblems(t *testing.T) {
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "notes.txt"), "x")
	noRules := t.TempDir()
	writeFile(t, filepath.Join(noRules, "a.yaml"), "domain: a\ndescriptors: []\n")
	writeFile(t, filepath.Join(noRules, "b.yaml"), "domain: b\n")
	dangling := t.TempDir()
	if err := os.Symlink(filepath.Join(dangling, "gone.yaml"), filepath.Join(dangling, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
		want string
	}{
		{"no rule files", empty, "rules: no rule files (*.yaml, *.yml) in " + empty + " (want at least one rule)"},
		{"no rules", noRules, "rules: no rule in " + noRules + " (2 rule files, no descriptor with rate_limit or rate_limits; " +
			"want at least one, and to lift every limit keep a rule with unlimited: true)"},
		{"missing directory", filepath.Join(empty, "nope"), "rules: read directory: open " + filepath.Join(empty, "nope") + ": no such file or directory"},
		{"dangling symlink", dangling, "rules: stat " + filepath.Join(dangling, "rules.yaml") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			summary, err := Validate(tt.dir, Options{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate = %q, %v; want error %q", summary, err, tt.want)
			}
		})
	}
	if snap, err := LoadDir(empty, Options{}); err != nil || snap.NumRules() != 0 {
		t.Errorf("LoadDir(empty) = %v, %v; want an empty snapshot", snap, err)
	}
}

func TestPolicyValidationIsApplied(t *testing.T) {
	_, err := Parse("rules.yaml", doc(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: year, unit_multiplier: 100, requests_per_unit: 1}
`), Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "rules.yaml:4: descriptors[0].rate_limit: ") || !strings.Contains(err.Error(), "invalid policy") {
		t.Errorf("Parse = %v, want the algorithm's invalid-policy error at descriptors[0].rate_limit", err)
	}
}

// The shipped examples load, and each descriptor documented in their
// comments selects the documented rule. The Envoy and Istio manifests send
// these descriptors.
func TestExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "config")
	summary, err := Validate(dir, Options{})
	if err != nil {
		t.Fatalf("Validate(examples): %v", err)
	}
	t.Log(summary)
	snap, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain    string
		entries   []algo.Entry
		id        string
		limits    []string // limit names, in order
		unlimited bool
	}{
		{"edge", entries("remote_address=203.0.113.7"), "per_ip", []string{"per_ip"}, false},
		{"edge", entries("remote_address=192.0.2.66"), "blocked_ip", []string{"blocked_ip"}, false},
		{"edge", entries("remote_address=198.51.100.10"), "edge.remote_address_198.51.100.10", nil, true},
		{"edge", entries("user_id=alice"), "edge.user_id", []string{"user_per_second", "user_per_day"}, false},
		{"edge", entries("tier=partner", "user_id=alice"), "partner_per_second", []string{"partner_per_second"}, false},
		{"edge", entries("tier=vip", "user_id=alice"), "vip_per_second", []string{"vip_per_second"}, false},
		{"edge", entries("route=login"), "login_path", []string{"login_path"}, false},
		{"edge", entries("route=api"), "api_paths", []string{"api_paths"}, false},
		{"edge", entries("route=healthz"), "edge.route_healthz", nil, true},
		{"edge", entries("generic_key=login", "remote_address=203.0.113.7"), "edge.generic_key_login.remote_address", []string{"login_per_minute", "login_per_hour"}, false},
		{"edge", entries("header_match=write", "user_id=alice"), "user_writes", []string{"user_writes"}, false},
		{"internal", entries("tenant=acme"), "tenant_monthly", []string{"tenant_monthly"}, false},
		{"internal", entries("tenant=trial-42"), "trial_pool", []string{"trial_pool"}, false},
		{"internal", entries("generic_key=reports", "tenant=acme"), "reports_per_week", []string{"reports_per_week"}, false},
		{"versions", entries("version=stable"), "stable", []string{"stable"}, false},
		{"versions", entries("version=canary"), "canary", []string{"canary"}, false},
		{"versions", entries("version=unrouted"), "unrouted", []string{"unrouted"}, false},
		{"versions", entries("version=v3"), "other_version", []string{"other_version"}, false},
	}
	for _, tt := range tests {
		r := snap.Match(tt.domain, tt.entries)
		if r == nil {
			t.Errorf("%s %v: no rule, want %s", tt.domain, tt.entries, tt.id)
			continue
		}
		var names []string
		for _, l := range r.Limits {
			names = append(names, l.Name)
		}
		if r.ID != tt.id || !reflect.DeepEqual(names, tt.limits) || r.Unlimited != tt.unlimited {
			t.Errorf("%s %v: rule %s limits %q unlimited %v; want %s %q %v", tt.domain, tt.entries, r.ID, names, r.Unlimited, tt.id, tt.limits, tt.unlimited)
		}
	}
	if got := len(tests); got != snap.NumRules() {
		t.Errorf("the table covers %d rules, the examples have %d: document every rule", got, snap.NumRules())
	}
}
