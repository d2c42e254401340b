package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestOverrideCLIRefusesBadInput: mistakes are caught before any call,
// each naming the flag.
func TestOverrideCLIRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "Usage:\n  envoy-rls override"},
		{"unknown subcommand", []string{"pause"}, 2, `unknown subcommand "pause"`},
		{"factor and absolute", []string{"set", "--factor=0.5", "--requests-per-unit=3", "--ttl=1m"}, 1, "exactly one of --factor and --requests-per-unit"},
		{"bad factor", []string{"set", "--factor=half", "--ttl=1m"}, 1, `--factor: "half" is not a number`},
		{"no ttl", []string{"set", "--factor=0.5"}, 1, "--ttl: required"},
		{"clear nothing", []string{"clear", "--reason=x"}, 1, "want --domain"},
		{"missing token file", []string{"list", "--token-file=/nonexistent/token"}, 2, "--token-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := tc.args
			if len(args) > 0 {
				// 127.0.0.1:1 refuses connections: a call that is made fails otherwise.
				args = append(args, "--addr=127.0.0.1:1")
			}
			code := run(append([]string{"override"}, args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d with %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}
