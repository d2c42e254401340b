package cli

import (
	"testing"
)

// TestValidateMaxDelay: a rule's max_delay is judged against --max-delay
// (or ENVOY_RLS_MAX_DELAY), 1s by default.
func TestValidateMaxDelay(t *testing.T) {
	const rl = "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 1500ms}"
	tests := []struct {
		name string
		args []string
		env  string // ENVOY_RLS_MAX_DELAY, when set
		code int
		want string // in stderr, or in stdout when code is 0
	}{
		{name: "default ceiling", code: 1, want: "max_delay: 1.5s is out of range (want a duration such as 500ms, above 0 and at most the server's --max-delay 1s)"},
		{name: "raised by the flag", args: []string{"--max-delay=2s"}, code: 0, want: "1 limit OK"},
		{name: "raised by the environment", env: "2s", code: 0, want: "1 limit OK"},
		{name: "flag wins over the environment", args: []string{"--max-delay=1s"}, env: "2s", code: 1, want: "--max-delay 1s"},
		{name: "zero", args: []string{"--max-delay=0"}, code: 2, want: "--max-delay: 0s must be positive"},
		{name: "held cap zero", args: []string{"--max-held=0"}, code: 2, want: "--max-held: 0 must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("ENVOY_RLS_MAX_DELAY", tc.env)
			}
			expectValidate(t, append(tc.args, oneLimitDir(t, rl)), tc.code, tc.want)
		})
	}
}
