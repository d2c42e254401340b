package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestStartErrorsAreHumanLines starts serve with a bad flag, a bad rules
// directory and a bad address. Each problem must come out as one plain
// line that names it: no flag list dumped after a typo, no JSON log entry,
// no stack trace. Log lines from before the failure (rules loaded) may
// precede it.
func TestStartErrorsAreHumanLines(t *testing.T) {
	t.Parallel()
	bad := rulesDir(t, map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: mins, requests_per_unit: 1}\n",
		"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, colour: red}\n",
	})
	base := []string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", ""}
	tests := []struct {
		name   string
		args   []string
		prefix string   // every error line starts with it
		want   []string // one error line each, in order
	}{
		{"unknown flag", []string{"--config-dir", shopDir(t), "--colour", "blue"}, "envoy-rls serve: ",
			[]string{"unknown flag: --colour"}},
		{"bad flag value", []string{"--config-dir", shopDir(t), "--grpc-max-connection-age", "soon"}, "envoy-rls serve: ",
			[]string{`invalid argument "soon" for "--grpc-max-connection-age" flag`}},
		{"missing rules directory", []string{"--config-dir", filepath.Join(bad, "missing")}, "envoy-rls serve: cannot start: ",
			[]string{"--config-dir: no rule directory at"}},
		{"two bad rule files", []string{"--config-dir", bad}, "envoy-rls serve: cannot start: ",
			[]string{"a.yaml:4: descriptors[0].rate_limit.unit", "b.yaml:4: descriptors[0].rate_limit.colour"}},
		{"port out of range", []string{"--config-dir", shopDir(t), "--grpc-addr", "127.0.0.1:99999"}, "envoy-rls serve: cannot start: ",
			[]string{"--grpc-addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stderr, code := runServeToFailure(t, nil, append(append([]string{}, base...), tt.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr:\n%s", stderr)
			}
			var errLines []string
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if strings.HasPrefix(l, "{") {
					if strings.Contains(l, `"level":"error"`) {
						t.Errorf("start error logged as JSON: %s", l)
					}
					continue // an info line from before the failure
				}
				errLines = append(errLines, l)
			}
			if len(errLines) != len(tt.want) {
				t.Fatalf("%d error lines, want %d:\n%s", len(errLines), len(tt.want), stderr)
			}
			for i, l := range errLines {
				if !strings.HasPrefix(l, tt.prefix) {
					t.Errorf("line %q does not start with %q", l, tt.prefix)
				}
				if strings.Contains(l, "goroutine ") || strings.Contains(l, "usage:") {
					t.Errorf("line %q: a stack or usage dump, want the problem alone", l)
				}
				if i < len(tt.want) && !strings.Contains(l, tt.want[i]) {
					t.Errorf("line %q lacks %q", l, tt.want[i])
				}
			}
		})
	}
}

// TestCheckValueWithComma sends, with `envoy-rls check`, a descriptor value
// that holds a comma, escaped as \, on the command line: the rule for that
// exact value must match, so its limit of 1 denies the second call.
func TestCheckValueWithComma(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"accept.yaml": `domain: web
descriptors:
  - key: accept
    value: "text/html,application/json"
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: fixed_window}
`})
	s := startServer(t, serveOpts{ConfigDir: dir})
	args := []string{"check", "--addr", s.GRPCAddr, "--domain", "web", "-d", `accept=text/html\,application/json`}
	for i, want := range []struct {
		code int
		out  string
	}{{0, "OK limit=1/HOUR"}, {1, "OVER_LIMIT limit=1/HOUR"}} {
		out, stderr, code := runCLI(t, nil, args...)
		if code != want.code || !strings.Contains(out, want.out) || !strings.Contains(out, "accept=text/html,application/json") {
			t.Errorf("call %d: exit %d, stdout %q, stderr %q; want exit %d and %q", i+1, code, out, stderr, want.code, want.out)
		}
	}
}
