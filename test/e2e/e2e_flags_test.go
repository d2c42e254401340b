package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// TestBadFlagsAndEnv starts serve with a bad flag or environment value:
// it must exit non-zero, before serving, with a message naming the flag.
func TestBadFlagsAndEnv(t *testing.T) {
	t.Parallel()
	dir := shopDir(t)
	base := []string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string // substrings of stderr
	}{
		{"unknown algorithm", nil, []string{"--config-dir", dir, "--default-algorithm", "leaky_bucket"},
			[]string{"--default-algorithm", "leaky_bucket"}},
		{"unknown algorithm from env", []string{"ENVOY_RLS_DEFAULT_ALGORITHM=leaky_bucket"}, []string{"--config-dir", dir},
			[]string{"--default-algorithm", "leaky_bucket"}},
		{"bad redis url", nil, []string{"--config-dir", dir, "--redis-url", "http://127.0.0.1:6379"},
			[]string{"--redis-url"}},
		{"bad redis url from env", []string{"ENVOY_RLS_REDIS_URL=ftp://x"}, []string{"--config-dir", dir},
			[]string{"--redis-url"}},
		{"bad duration from env", []string{"ENVOY_RLS_SHUTDOWN_DELAY=soon"}, []string{"--config-dir", dir},
			[]string{"ENVOY_RLS_SHUTDOWN_DELAY", "--shutdown-delay", "soon"}},
		{"bad bool from env", []string{"ENVOY_RLS_SHADOW_MODE=maybe"}, []string{"--config-dir", dir},
			[]string{"ENVOY_RLS_SHADOW_MODE", "--shadow-mode"}},
		{"bad integer from env", []string{"ENVOY_RLS_MAX_DESCRIPTORS=many"}, []string{"--config-dir", dir},
			[]string{"ENVOY_RLS_MAX_DESCRIPTORS", "--max-descriptors"}},
		{"bad log level", nil, []string{"--config-dir", dir, "--log-level", "loud"}, []string{"--log-level"}},
		{"bad log format from env", []string{"ENVOY_RLS_LOG_FORMAT=xml"}, []string{"--config-dir", dir}, []string{"--log-format", "xml"}},
		{"bad headers", nil, []string{"--config-dir", dir, "--response-headers", "fancy"}, []string{"--response-headers", "fancy"}},
		{"bad failure mode", nil, []string{"--config-dir", dir, "--redis-url", "redis://127.0.0.1:1", "--redis-failure-mode", "panic"},
			[]string{"--redis-failure-mode"}},
		{"negative memstore bound", nil, []string{"--config-dir", dir, "--memstore-max-keys", "-1"}, []string{"--memstore-max-keys", "-1"}},
		{"negative memstore bound from env", []string{"ENVOY_RLS_MEMSTORE_MAX_KEYS=-5"}, []string{"--config-dir", dir}, []string{"--memstore-max-keys", "-5"}},
		{"near-limit ratio above 1 from env", []string{"ENVOY_RLS_NEAR_LIMIT_RATIO=1.5"}, []string{"--config-dir", dir}, []string{"--near-limit-ratio", "1.5"}},
		{"unknown flag", nil, []string{"--config-dir", dir, "--colour", "blue"}, []string{"unknown flag: --colour"}},
		{"missing config dir", nil, []string{"--config-dir", filepath.Join(dir, "missing")}, []string{"missing"}},
		{"config dir from env, missing", []string{"ENVOY_RLS_CONFIG_DIR=" + filepath.Join(dir, "gone")}, nil, []string{"gone"}},
		{"client CA without a certificate", nil, []string{"--config-dir", dir, "--grpc-tls-client-ca", filepath.Join(dir, "shop.yaml")},
			[]string{"--grpc-tls-client-ca"}},
		{"bad grpc address", nil, []string{"--config-dir", dir, "--grpc-addr", "127.0.0.1:99999"}, []string{"--grpc-addr"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stderr, code := runServeToFailure(t, tt.env, append(append([]string{}, base...), tt.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr:\n%s", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// runServeToFailure runs a serve command that should fail at start. If it
// starts serving instead, it is killed and t fails at once rather than
// waiting for a timeout.
func runServeToFailure(t *testing.T, env []string, args ...string) (stderr string, code int) {
	t.Helper()
	logs := &childproc.Buffer{}
	cmd := exec.Command(binPath, args...)
	cmd.Env = childEnv(env)
	cmd.Stdout, cmd.Stderr = logs, logs
	proc, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(startTimeout)
	for {
		select {
		case <-proc.Done():
			return logs.String(), proc.ExitCode()
		case <-deadline:
		case <-time.After(pollInterval):
			if rlsproc.ServingLine(logs.String(), 0).GRPC == "" {
				continue
			}
		}
		proc.Kill()
		t.Fatalf("envoy-rls %v started serving instead of failing; logs:\n%s", args, logs)
	}
}

// TestEnvTwins configures serve only through ENVOY_RLS_* variables, and
// shows that a command-line flag beats its environment twin.
func TestEnvTwins(t *testing.T) {
	t.Parallel()
	dir := shopDir(t)
	s := startServer(t, serveOpts{Env: []string{
		"ENVOY_RLS_CONFIG_DIR=" + dir,
		"ENVOY_RLS_MAX_DESCRIPTORS=1",
		"ENVOY_RLS_DEFAULT_ALGORITHM=leaky_bucket", // overridden by the flag below
		"ENVOY_RLS_RESPONSE_HEADERS=legacy",
	}, Args: []string{"--default-algorithm", "fixed_window"}})

	resp := s.ask("shop", desc("plan", "free"))
	if resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Errorf("rules from ENVOY_RLS_CONFIG_DIR not served: %v", resp)
	}
	if len(resp.GetResponseHeadersToAdd()) == 0 {
		t.Errorf("ENVOY_RLS_RESPONSE_HEADERS=legacy: no headers in %v", resp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("plan", "free"), desc("user", "x")}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "exceed the limit of 1") {
		t.Errorf("two descriptors with ENVOY_RLS_MAX_DESCRIPTORS=1: %v, want INVALID_ARGUMENT", err)
	}
	var serving struct {
		DefaultAlgorithm string `json:"default_algorithm"`
	}
	for _, l := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(l, `"envoy-rls serving"`) {
			_ = json.Unmarshal([]byte(l), &serving)
		}
	}
	if serving.DefaultAlgorithm != "fixed_window" {
		t.Errorf("default algorithm %q, want the flag's fixed_window over the environment's leaky_bucket", serving.DefaultAlgorithm)
	}
	s.stop()
}

// TestConsoleLogFormat checks --log-format console writes human lines, not
// JSON: the rules load and are logged, then the port cannot be opened.
func TestConsoleLogFormat(t *testing.T) {
	t.Parallel()
	_, stderr, code := runCLI(t, nil, "serve", "--log-format", "console", "--config-dir", shopDir(t),
		"--grpc-addr", "127.0.0.1:99999", "--http-addr", "127.0.0.1:0")
	if code == 0 {
		t.Fatalf("exit 0 with a bad port, want non-zero")
	}
	first := strings.SplitN(strings.TrimSpace(stderr), "\n", 2)[0]
	if json.Valid([]byte(first)) || !strings.Contains(first, "INFO") || !strings.Contains(first, "rules loaded") {
		t.Errorf("console log line %q: want a human-readable \"rules loaded\" line with INFO", first)
	}
}
