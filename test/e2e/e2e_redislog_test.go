package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// TestDeadRedisOneLine: inspect against a Redis that is not there prints
// one line, its own, and none of go-redis's pool.go lines (go-redis logs
// through envoy-rls's logger, which the CLI commands keep silent).
func TestDeadRedisOneLine(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	_, stderr, code := runCLI(t, nil, "inspect", "--redis-url", "redis://"+addr)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (Redis failed); stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "envoy-rls inspect: ") || !strings.Contains(lines[0], addr) {
		t.Errorf("stderr %q: want one line, envoy-rls inspect's, naming %s", stderr, addr)
	}
	if strings.Contains(stderr, "pool.go") || strings.Contains(stderr, "redis: 20") {
		t.Errorf("stderr has go-redis's own log lines:\n%s", stderr)
	}
}

// closedAddr is a loopback address nothing listens on: a port just freed.
func closedAddr(t *testing.T) string {
	t.Helper()
	port, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}
