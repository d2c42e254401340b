package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// Flags of the failure-mode servers.
const (
	bmTimeout  = 200 * time.Millisecond
	bmFailures = 3
)

// TestFailureModeBreaker runs, for each --redis-failure-mode, one server on
// one Redis through two outages, Redis killed (connection refused) and then
// frozen with SIGSTOP (connections open, no replies), each under a bounded
// concurrent load, and checks:
//   - every answer is the one the mode promises (local: the limit divided by
//     --expected-replicas, per replica);
//   - no call hangs (outLate);
//   - the circuit breaker opened, so most calls never waited on Redis
//     (envoy_rls_backend_errors_total{kind="circuit_open"});
//   - /readyz: not ready in mode error, ready (degraded) in the others;
//   - after SIGCONT or a restart, Redis decides again (the full limit, not
//     the divided one) with no restart of envoy-rls;
//   - go_goroutines returns to its level before the outages.
func TestFailureModeBreaker(t *testing.T) {
	t.Parallel()
	for _, m := range failureModes() {
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			r := redistest.Standalone(t)
			s := startServer(t, serveOpts{
				ConfigDir: rulesDir(t, map[string]string{"brk.yaml": clientRules("brk")}),
				Args: []string{"--redis-url", "redis://" + r.Addr, "--redis-failure-mode", m.mode,
					"--redis-timeout=" + bmTimeout.String(), "--expected-replicas=2",
					fmt.Sprintf("--redis-breaker-failures=%d", bmFailures), "--redis-breaker-cooldown=300ms"},
			})
			if got, err := callOutcome(s, "brk", "warm"); err != nil || got != outOK {
				t.Fatalf("with Redis up: %v, %v; want OK", got, err)
			}
			baseGoroutines := s.scrape().get("go_goroutines", nil)
			for _, o := range outages() {
				before := s.scrape()
				o.brk(r, t)
				bmLoad(t, s, o.name, m.want)
				after := s.scrape()
				shortCircuited := after.get("envoy_rls_backend_errors_total", map[string]string{"kind": "circuit_open"}) -
					before.get("envoy_rls_backend_errors_total", map[string]string{"kind": "circuit_open"})
				if shortCircuited < bmWorkers*bmCalls/2 {
					t.Errorf("Redis %s: only %v of %d calls short-circuited by the breaker", o.name, shortCircuited, bmWorkers*bmCalls)
				}
				if n := after.get("envoy_rls_backend_failure_mode_total", map[string]string{"mode": m.mode}) -
					before.get("envoy_rls_backend_failure_mode_total", map[string]string{"mode": m.mode}); n < bmWorkers*bmCalls {
					t.Errorf("Redis %s: envoy_rls_backend_failure_mode_total{mode=%q} rose by %v, want ≥ %d", o.name, m.mode, n, bmWorkers*bmCalls)
				}
				if after.get("envoy_rls_backend_breaker_state", map[string]string{"state": "closed"}) != 0 {
					t.Errorf("Redis %s: breaker reported closed during the outage", o.name)
				}
				code, body := s.get("/readyz")
				if code != m.ready || (code != 200 && !strings.Contains(body, "backend")) {
					t.Errorf("Redis %s: /readyz %d %q, want %d", o.name, code, body, m.ready)
				}

				o.mend(r, t)
				awaitRedisDecides(t, s, r, "brk", "back-"+o.name+"-")
				// The full limit of 4 again, not the fallback's answer.
				for i := range 5 {
					want := outOK
					if i == 4 {
						want = outOverLimit
					}
					if got, err := callOutcome(s, "brk", "after-"+o.name); err != nil || got != want {
						t.Fatalf("after Redis %s returned, call %d: %v, %v; want %s", o.name, i, got, err, want)
					}
				}
				s.awaitReadyz(t, "/readyz is 200 with Redis back", http.StatusOK, "")
			}
			s.awaitGoroutines(t, baseGoroutines, 10)
			s.stop()
		})
	}
}

// The bounded load of one outage.
const (
	bmWorkers = 4
	bmCalls   = 6
)

// bmLoad sends bmWorkers × bmCalls requests, each worker for a client of
// its own, and requires every answer to be want(n) for the worker's n-th
// call and none to be still running at callTimeout.
func bmLoad(t *testing.T, s *server, prefix string, want func(n int) outcome) {
	t.Helper()
	if wrong := outageLoad(s, "brk", prefix, bmWorkers, bmCalls, want); len(wrong) > 0 {
		t.Errorf("Redis %s, %d clients × %d calls: wrong answers (LATE: still running at %v): %v", prefix, bmWorkers, bmCalls, callTimeout, wrong)
	}
}
