package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// breakerRules: 4 per hour per client, so one client's calls never refill
// during a test; "local" with 2 expected replicas allows 2 per replica.
const breakerRules = `
domain: brk
descriptors:
  - key: client
    rate_limit:
      name: per_client
      unit: hour
      requests_per_unit: 4
      algorithm: token_bucket
`

// Flags of the failure-mode servers; bmBound is the deadline of each call
// under load. It only turns a call that hangs on a dead Redis into a
// failure instead of a stuck test: it is far above --redis-timeout so a
// loaded machine cannot trip it. That calls do not wait on Redis is shown
// structurally, by the breaker's circuit_open count.
const (
	bmTimeout  = 200 * time.Millisecond
	bmBound    = 10 * time.Second
	bmFailures = 3
)

// bmCall sends one request for client and reduces the answer to OK,
// OVER_LIMIT, UNAVAILABLE or LATE (still running at bmBound).
func bmCall(s *server, client string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bmBound)
	defer cancel()
	resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "brk", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", client)}})
	switch {
	case err == nil:
		return resp.GetOverallCode().String(), nil
	case status.Code(err) == codes.Unavailable:
		return "UNAVAILABLE", nil
	case status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil:
		return "LATE", nil
	}
	return "", err
}

// TestFailureModeBreaker runs, for each --redis-failure-mode, one server on
// one Redis through two outages, Redis killed (connection refused) and then
// frozen with SIGSTOP (connections open, no replies), each under a bounded
// concurrent load, and checks:
//   - every answer is the one the mode promises (local: the limit divided by
//     --expected-replicas, per replica);
//   - no call hangs (bmBound);
//   - the circuit breaker opened, so most calls never waited on Redis
//     (envoy_rls_backend_errors_total{kind="circuit_open"});
//   - /readyz: not ready in mode error, ready (degraded) in the others;
//   - after SIGCONT or a restart, Redis decides again (the full limit, not
//     the divided one) with no restart of envoy-rls;
//   - go_goroutines returns to its level before the outages.
func TestFailureModeBreaker(t *testing.T) {
	t.Parallel()
	modes := []struct {
		mode string
		// want is the answer to the n-th (0-based) call for one client
		// while Redis is away.
		want func(n int) string
		// ready is the /readyz status while Redis is away.
		ready int
	}{
		{"error", func(int) string { return "UNAVAILABLE" }, 503},
		{"allow", func(int) string { return "OK" }, 200},
		{"deny", func(int) string { return "OVER_LIMIT" }, 200},
		{"local", func(n int) string {
			if n < 2 {
				return "OK"
			}
			return "OVER_LIMIT"
		}, 200},
	}
	for _, m := range modes {
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			r := redistest.Standalone(t)
			s := startServer(t, serveOpts{
				ConfigDir: rulesDir(t, map[string]string{"brk.yaml": breakerRules}),
				Args: []string{"--redis-url", "redis://" + r.Addr, "--redis-failure-mode", m.mode,
					"--redis-timeout=" + bmTimeout.String(), "--expected-replicas=2",
					fmt.Sprintf("--redis-breaker-failures=%d", bmFailures), "--redis-breaker-cooldown=300ms"},
			})
			if got, err := bmCall(s, "warm"); err != nil || got != "OK" {
				t.Fatalf("with Redis up: %v, %v; want OK", got, err)
			}
			baseGoroutines := s.scrape().get("go_goroutines", nil)
			rc := r.Client(t)

			outages := []struct {
				name      string
				brk, mend func(*redistest.Server, testing.TB)
			}{
				{"killed", (*redistest.Server).Kill, (*redistest.Server).Start},
				{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume},
			}
			for _, o := range outages {
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
				n := 0
				eventually.True(t, "decisions come from Redis again", func() (bool, string) {
					n++
					v := fmt.Sprintf("back-%s-%d", o.name, n)
					got, err := bmCall(s, v)
					if err != nil || got != "OK" {
						return false, fmt.Sprintf("%v %v", got, err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					defer cancel()
					keys, err := rc.Keys(ctx, "*"+v+"*").Result()
					return err == nil && len(keys) == 1, fmt.Sprintf("keys for %s: %v %v", v, keys, err)
				})
				// The full limit of 4 again, not the fallback's answer.
				for i := range 5 {
					want := "OK"
					if i == 4 {
						want = "OVER_LIMIT"
					}
					if got, err := bmCall(s, "after-"+o.name); err != nil || got != want {
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
// call and none to be still running at bmBound.
func bmLoad(t *testing.T, s *server, prefix string, want func(n int) string) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wrong = map[string]int{}
	)
	for w := range bmWorkers {
		wg.Go(func() {
			for n := range bmCalls {
				got, err := bmCall(s, fmt.Sprintf("%s-%d", prefix, w))
				if err == nil && got == want(n) {
					continue
				}
				mu.Lock()
				if err != nil {
					wrong[err.Error()]++
				} else {
					wrong[fmt.Sprintf("call %d: got %s, want %s", n, got, want(n))]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("Redis %s, %d clients × %d calls: wrong answers (LATE: still running at %v): %v", prefix, bmWorkers, bmCalls, bmBound, wrong)
	}
}
