package serveconfig

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// parseServe parses args as serve's command line (and environment), failing
// t when they do not parse; validation is left to the test.
func parseServe(t *testing.T, args ...string) *Settings {
	t.Helper()
	cfg, fs := New("serve")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	if err := cfg.Finish(fs, flagenv.ProcessEnv("envoy-rls")); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return cfg
}

// expectValidation fails t unless err is nil when want is "", or an error
// containing want otherwise.
func expectValidation(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("validate: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("validate = %v, want an error containing %q", err, want)
	}
}

func TestHTTPFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error; "" for valid
	}{
		{name: "defaults"},
		{name: "debug off", args: []string{"--debug-addr="}},
		{name: "zero read timeout", args: []string{"--http-read-timeout=0s"}, want: "--http-read-timeout: 0s must be positive"},
		{name: "negative idle timeout", args: []string{"--http-idle-timeout=-1s"}, want: "--http-idle-timeout: -1s must be positive"},
		{name: "zero header bytes", args: []string{"--http-max-header-bytes=0"}, want: "--http-max-header-bytes: 0 must be positive"},
		{name: "zero connections", args: []string{"--http-max-connections=0"}, want: "--http-max-connections: 0 must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectValidation(t, parseServe(t, tt.args...).http.validate(), tt.want)
		})
	}
}

// TestDebugAddrDefaultsToLoopback: the debug endpoints are not reachable
// from the network unless an operator says so (envoyproxy/ratelimit binds
// its debug port on all interfaces).
func TestDebugAddrDefaultsToLoopback(t *testing.T) {
	cfg := parseServe(t)
	if cfg.http.debugAddr != "127.0.0.1:6070" {
		t.Errorf("--debug-addr default %q, want 127.0.0.1:6070", cfg.http.debugAddr)
	}
	l := cfg.http.limits()
	if l.ReadTimeout <= 0 || l.IdleTimeout <= 0 || l.MaxHeaderBytes <= 0 || l.MaxConnections <= 0 {
		t.Errorf("server limits %v/%v/%d/%d, want all set by default", l.ReadTimeout, l.IdleTimeout, l.MaxHeaderBytes, l.MaxConnections)
	}
}
