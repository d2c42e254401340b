package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// blockRules is one domain whose only rule denies everything: what a
// reload must never drop silently.
const blockRules = `
domain: blocked
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 0}
`

// health asks the gRPC health service about svc.
func (s *server) health(svc string) healthpb.HealthCheckResponse_ServingStatus {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(s.grpcConn()).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		s.t.Fatalf("grpc health check %q: %v", svc, err)
	}
	return resp.GetStatus()
}

// readinessAgrees fails t unless /readyz, /healthcheck and gRPC health (for
// the server, the rate-limit service and envoyproxy/ratelimit's "ratelimit") all say ready, or all say not.
func (s *server) readinessAgrees(t *testing.T, when string, ready bool) {
	t.Helper()
	wantCode, wantStatus := http.StatusOK, healthpb.HealthCheckResponse_SERVING
	if !ready {
		wantCode, wantStatus = http.StatusServiceUnavailable, healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, path := range []string{"/readyz", "/healthcheck"} {
		if code, body := s.get(path); code != wantCode {
			t.Errorf("%s: %s %d %q, want %d", when, path, code, body, wantCode)
		}
	}
	for _, svc := range []string{"", rlsService, "ratelimit"} {
		if got := s.health(svc); got != wantStatus {
			t.Errorf("%s: grpc health %q %v, want %v", when, svc, got, wantStatus)
		}
	}
}

// TestReadinessAgrees walks the readiness states a running server can be
// in: /readyz, /healthcheck and gRPC health answer alike in each, and a gRPC
// health Watch stream follows the changes. A bad config push changes
// nothing (the last good rules stay), so it cannot take every replica out.
func TestReadinessAgrees(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	dir := shopDir(t)
	s := startServer(t, serveOpts{
		ConfigDir: dir,
		Args:      []string{"--redis-url", "redis://" + r.Addr, "--redis-failure-mode=error", "--shutdown-delay=2s"},
	})
	s.readinessAgrees(t, "started", true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := healthpb.NewHealthClient(s.grpcConn()).Watch(ctx, &healthpb.HealthCheckRequest{Service: rlsService})
	if err != nil {
		t.Fatalf("health watch: %v", err)
	}
	type update struct {
		status healthpb.HealthCheckResponse_ServingStatus
		err    error
	}
	updates := make(chan update, 100)
	go func() {
		for {
			resp, err := watch.Recv()
			updates <- update{resp.GetStatus(), err}
			if err != nil {
				return
			}
		}
	}()
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.After(eventually.Bound) // for a broken server; see eventually
		for {
			select {
			case u := <-updates:
				if u.err != nil {
					t.Fatalf("health watch, waiting for %v: %v", want, u.err)
				}
				if u.status == want {
					return
				}
			case <-deadline:
				t.Fatalf("health watch: no %v within %v", want, eventually.Bound)
			}
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)

	r.Stop(t)
	s.awaitReadyz(t, "Redis stopped", http.StatusServiceUnavailable, "backend")
	s.readinessAgrees(t, "Redis stopped", false)
	next(healthpb.HealthCheckResponse_NOT_SERVING)

	r.Start(t)
	s.awaitReadyz(t, "Redis back", http.StatusOK, "")
	s.readinessAgrees(t, "Redis back", true)
	next(healthpb.HealthCheckResponse_SERVING)

	before := reloads(s.scrape(), "error")
	writeFile(t, filepath.Join(dir, "shop.yaml"), "domain: shop\ndescriptors: []\n")
	eventually.True(t, "the emptied rules refused", func() (bool, string) {
		got := reloads(s.scrape(), "error")
		return got > before, fmt.Sprintf("reload errors %v", got)
	})
	s.readinessAgrees(t, "after a refused config push", true)

	s.signal(syscall.SIGTERM)
	s.awaitReadyz(t, "draining", http.StatusServiceUnavailable, "shutting down")
	s.readinessAgrees(t, "draining", false)
	if code := s.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// reloadGauges reads the last-reload gauges.
func reloadGauges(m metrics) (successful, timestamp float64) {
	return m.get("envoy_rls_config_last_reload_successful", nil),
		m.get("envoy_rls_config_last_reload_success_timestamp_seconds", nil)
}

// TestReloadRefusesNoRules empties, then deletes, the only rule file under
// a running server: both reloads are refused alike (counted, logged,
// envoy_rls_config_last_reload_successful 0), and the last good rules, a
// block, keep denying. A good file afterwards applies and turns the gauge
// back to 1 with a newer timestamp.
func TestReloadRefusesNoRules(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"blocked.yaml": blockRules})
	s := startServer(t, serveOpts{ConfigDir: dir})
	ok, loadedAt := reloadGauges(s.scrape())
	if ok != 1 || loadedAt <= 0 {
		t.Fatalf("after start: last_reload_successful %v, success_timestamp %v; want 1 and a time", ok, loadedAt)
	}
	denied := func(when string) {
		t.Helper()
		if got := s.ask("blocked", desc("client", "c")).GetOverallCode(); got != pb.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: blocked domain answered %v, want OVER_LIMIT from the last good rules", when, got)
		}
	}
	denied("after start")

	path := filepath.Join(dir, "blocked.yaml")
	for _, push := range []struct {
		name   string
		change func()
	}{
		{"every file emptied", func() { writeFile(t, path, "domain: blocked\ndescriptors: []\n") }},
		{"every file deleted", func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		before := reloads(s.scrape(), "error")
		push.change()
		eventually.True(t, push.name+": reload refused", func() (bool, string) {
			got := reloads(s.scrape(), "error")
			return got > before, fmt.Sprintf("reload errors %v", got)
		})
		ok, at := reloadGauges(s.scrape())
		if ok != 0 || at != loadedAt {
			t.Errorf("%s: last_reload_successful %v, success_timestamp %v; want 0 and still %v", push.name, ok, at, loadedAt)
		}
		denied(push.name)
		if code, body := s.get("/readyz"); code != http.StatusOK {
			t.Errorf("%s: /readyz %d %q, want 200 (the last good rules serve)", push.name, code, body)
		}
	}
	if !strings.Contains(s.logs.String(), "rules reload failed, keeping the last good rules") {
		t.Errorf("refused reloads not logged as such")
	}

	writeFile(t, filepath.Join(dir, "api.yaml"), apiRules(3))
	waitLimit(t, s, "checkout", 3)
	ok, at := reloadGauges(s.scrape())
	if ok != 1 || at < loadedAt {
		t.Errorf("after a good push: last_reload_successful %v, success_timestamp %v; want 1 and at least %v", ok, at, loadedAt)
	}
	if s.ask("blocked", desc("client", "c")).GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("the removed domain still limits after a good push")
	}
	s.stop()
}

// TestStartWithoutRules: a rules directory that is missing, empty or
// defines no rule stops the start with one plain line (not a JSON log
// entry, no stack trace, no talk of last good rules, which there are none
// of) naming --config-dir and the path, and exit code 1.
func TestStartWithoutRules(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	noRules := filepath.Join(root, "norules")
	for _, d := range []string{empty, noRules} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(noRules, "a.yaml"), "domain: a\ndescriptors: []\n")
	tests := []struct {
		name, dir, want string
	}{
		{"missing", filepath.Join(root, "missing"), "no rule directory at"},
		{"empty", empty, "no rule files (*.yaml, *.yml)"},
		{"no rules", noRules, "no descriptor with rate_limit or rate_limits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stderr, code := runServeToFailure(t, nil, "serve", "--config-dir", tt.dir,
				"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0")
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d lines on stderr, want one:\n%s", len(lines), stderr)
			}
			msg, ok := strings.CutPrefix(lines[0], "envoy-rls serve: cannot start: ")
			if !ok || json.Valid([]byte(lines[0])) {
				t.Fatalf("stderr line %q: want a plain \"envoy-rls serve: cannot start: …\" line", lines[0])
			}
			for _, want := range []string{"--config-dir", tt.dir, tt.want} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			if strings.Contains(stderr, "last good") {
				t.Errorf("start-up failure talks of last good rules: %q", lines[0])
			}
		})
	}
}
