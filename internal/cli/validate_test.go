package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// logRulesDir writes a rules directory with one sliding_log limit of 50.
func logRulesDir(t *testing.T) string {
	t.Helper()
	return oneLimitDir(t, "{unit: second, requests_per_unit: 50, algorithm: sliding_log}")
}

// oneLimitDir writes a rules directory with domain d, whose descriptor k
// has the rate_limit rl.
func oneLimitDir(t *testing.T, rl string) string {
	t.Helper()
	dir := t.TempDir()
	rule := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + rl + "\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestValidateSlidingLogCap(t *testing.T) {
	capErr := func(n int64) string { return "--sliding-log-cap: " + algo.ValidateSlidingLogCap(n).Error() }
	tests := []struct {
		name string
		args []string
		env  string // ENVOY_RLS_SLIDING_LOG_CAP, when set
		code int
		want string // in stderr, or in stdout when code is 0
	}{
		{name: "default cap", code: 0, want: "1 domain, 1 rule, 1 limit OK"},
		{name: "cap fits", args: []string{"--sliding-log-cap=50"}, code: 0, want: "OK"},
		{name: "rule above cap", args: []string{"--sliding-log-cap=49"}, code: 1, want: "above the sliding_log cap of 49"},
		{name: "zero", args: []string{"--sliding-log-cap=0"}, code: 2, want: capErr(0)},
		{name: "negative", args: []string{"--sliding-log-cap=-5"}, code: 2, want: capErr(-5)},
		{name: "above max", args: []string{"--sliding-log-cap=1000001"}, code: 2, want: capErr(algo.MaxSlidingLogCap + 1)},
		{name: "zero from env", env: "0", code: 2, want: capErr(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("ENVOY_RLS_SLIDING_LOG_CAP", tc.env)
			}
			expectValidate(t, append(tc.args, logRulesDir(t)), tc.code, tc.want)
		})
	}
}

func TestValidateHelpListsAlgorithms(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runValidate([]string{"-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), algo.AlgorithmNames()) {
		t.Errorf("validate -h: exit %d, want 0 and help listing %s:\n%s", code, algo.AlgorithmNames(), &stderr)
	}
}

// TestValidateTakesServeFlags: validate accepts every serve flag (one set
// of definitions), so a Deployment's arguments and environment validate as
// they serve, and validates --config-dir when no directory is given.
func TestValidateTakesServeFlags(t *testing.T) {
	dir := logRulesDir(t)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
	}{
		{name: "serve flags and a directory", args: []string{"--redis-url=redis://127.0.0.1:1", "--grpc-addr=:9", "--limit-overrides=ignore", dir}, code: 0},
		{name: "config-dir flag", args: []string{"--config-dir", dir}, code: 0},
		{name: "config-dir from env", env: map[string]string{"ENVOY_RLS_CONFIG_DIR": dir}, code: 0},
		{name: "sliding-log-cap from env applies", env: map[string]string{"ENVOY_RLS_CONFIG_DIR": dir, "ENVOY_RLS_SLIDING_LOG_CAP": "10"}, code: 1},
		{name: "two directories", args: []string{dir, dir}, code: 2},
		{name: "unknown flag", args: []string{"--no-such-flag", dir}, code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := runValidate(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, &stdout, &stderr)
			}
		})
	}
}

// TestValidateMergeDomainConfig: a domain split over two files is refused
// unless --merge-domain-config (or its twin) joins them, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does.
func TestValidateMergeDomainConfig(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		env  string // ENVOY_RLS_MERGE_DOMAIN_CONFIG, when set
		code int
		want string
	}{
		{name: "refused by default", code: 1, want: `duplicate domain "d"`},
		{name: "flag", args: []string{"--merge-domain-config"}, code: 0, want: "1 domain, 2 rules, 2 limits OK"},
		{name: "env twin", env: "true", code: 0, want: "1 domain, 2 rules, 2 limits OK"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("ENVOY_RLS_MERGE_DOMAIN_CONFIG", tc.env)
			}
			expectValidate(t, append(tc.args, dir), tc.code, tc.want)
		})
	}
}

// TestValidateWarmup: validate accepts and refuses warmup blocks as serve
// loads them (one parser), naming the bad field.
func TestValidateWarmup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warmup string
		code   int
		want   string // in stderr, or in stdout when code is 0
	}{
		{"good", `{period: 10m, from: 0.33, start: "2026-12-24T10:00:00Z"}`, 0, "1 domain, 1 rule, 1 limit OK"},
		{"bad from", `{period: 10m, from: 0}`, 1, "d.yaml:4: descriptors[0].rate_limit.warmup.from: 0 is out of range"},
		{"bad start", `{period: 10m, start: tomorrow}`, 1, `descriptors[0].rate_limit.warmup.start: "tomorrow" is not a time`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := oneLimitDir(t, "{unit: second, requests_per_unit: 8, warmup: "+tc.warmup+"}")
			expectValidate(t, []string{dir}, tc.code, tc.want)
		})
	}
}

// expectValidate runs `envoy-rls validate args` and fails t unless it
// exits with code and prints want: on stdout when code is 0, else on
// stderr.
func expectValidate(t *testing.T, args []string, code int, want string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	got := runValidate(args, &stdout, &stderr)
	out := stderr.String()
	if code == 0 {
		out = stdout.String()
	}
	if got != code || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", got, code, want, &stdout, &stderr)
	}
}

// runValidate runs `envoy-rls validate args`.
func runValidate(args []string, stdout, stderr io.Writer) int {
	return run(append([]string{"validate"}, args...), stdout, stderr)
}

// TestValidatePaths: validate takes a directory or one file; a path that
// is not there is a wrong command line (exit 2), and with no argument it
// gives serve's hint; a YAML error names the line that breaks the file.
func TestValidatePaths(t *testing.T) {
	good := oneLimitDir(t, "{unit: second, requests_per_unit: 5}")
	broken := t.TempDir()
	// Line 6 is indented one space too few for rate_limit's mapping.
	writeRule(t, broken, "r.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n     requests_per_unit: 5\n")
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string // in stderr, or in stdout when code is 0
	}{
		{name: "directory", args: []string{good}, code: 0, want: "1 domain, 1 rule, 1 limit OK"},
		{name: "one file", args: []string{filepath.Join(good, "d.yaml")}, code: 0, want: "1 domain, 1 rule, 1 limit OK"},
		{name: "indentation error on line 6, file", args: []string{filepath.Join(broken, "r.yaml")}, code: 1,
			want: filepath.Join(broken, "r.yaml") + ":6: invalid YAML: did not find expected key"},
		{name: "indentation error on line 6, directory", args: []string{broken}, code: 1, want: "r.yaml:6: invalid YAML"},
		{name: "missing argument path", args: []string{missing}, code: 2, want: "envoy-rls validate: no rule file or directory at " + missing},
		{name: "missing --config-dir", args: []string{"--config-dir", missing}, code: 2,
			want: "--config-dir: no rule directory at " + missing + "; point validate at one"},
		{name: "missing twin, serve's example", env: map[string]string{"ENVOY_RLS_CONFIG_DIR": missing}, code: 2,
			want: "e.g. bin/envoy-rls validate examples/config in a checkout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			expectValidate(t, tc.args, tc.code, tc.want)
		})
	}
}
