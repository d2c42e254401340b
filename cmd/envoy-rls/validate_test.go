package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// logRulesDir writes a rules directory with one sliding_log limit of 50.
func logRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rule := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 50, algorithm: sliding_log}\n"
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
			var stdout, stderr bytes.Buffer
			code := validate(append(tc.args, logRulesDir(t)), &stdout, &stderr)
			out := stderr.String()
			if tc.code == 0 {
				out = stdout.String()
			}
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.want, &stdout, &stderr)
			}
		})
	}
}

func TestValidateHelpListsAlgorithms(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := validate([]string{"-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), algo.AlgorithmNames()) {
		t.Errorf("validate -h: exit %d, want 0 and help listing %s:\n%s", code, algo.AlgorithmNames(), &stderr)
	}
}
