package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// clientRules is the rule file of the failure-mode tests: 4 per hour per
// client in domain, so one client's calls never refill during a test;
// "local" with 2 expected replicas allows 2 per replica.
func clientRules(domain string) string {
	return `
domain: ` + domain + `
descriptors:
  - key: client
    rate_limit:
      name: per_client
      unit: hour
      requests_per_unit: 4
      algorithm: token_bucket
`
}

// outcome is what one call returned, reduced to what a failure mode
// promises.
type outcome string

const (
	outOK          outcome = "OK"
	outOverLimit   outcome = "OVER_LIMIT"
	outUnavailable outcome = "UNAVAILABLE"
	// outLate is a call still running at callTimeout: it waited 10 s on a
	// dead Redis configured with a 200 ms timeout. The deadline only turns
	// a hanging call into a failure instead of a stuck test; it is far
	// above --redis-timeout, so a loaded machine cannot trip it.
	outLate outcome = "LATE"
)

// callOutcome sends one request for client=value in domain.
func callOutcome(s *server, domain, value string) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{desc("client", value)}})
	switch {
	case err == nil:
		return outcome(resp.GetOverallCode().String()), nil
	case status.Code(err) == codes.Unavailable:
		return outUnavailable, nil
	case status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil:
		return outLate, nil
	}
	return "", err
}

// failureMode is a --redis-failure-mode with the outcome of the n-th
// (0-based) call for one client while Redis is away, and the /readyz
// status then.
type failureMode struct {
	mode  string
	want  func(n int) outcome
	ready int
}

func failureModes() []failureMode {
	return []failureMode{
		{"error", func(int) outcome { return outUnavailable }, http.StatusServiceUnavailable},
		{"allow", func(int) outcome { return outOK }, http.StatusOK},
		{"deny", func(int) outcome { return outOverLimit }, http.StatusOK},
		{"local", func(n int) outcome { // 4 per hour / 2 replicas
			if n < 2 {
				return outOK
			}
			return outOverLimit
		}, http.StatusOK},
	}
}

// outage is one way Redis goes away (brk) and comes back (mend).
type outage struct {
	name      string
	brk, mend func(*redistest.Server, testing.TB)
}

func outages() []outage {
	return []outage{
		{"killed", (*redistest.Server).Kill, (*redistest.Server).Start},
		{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume},
	}
}

// outageLoad sends workers × calls requests to domain, each worker for a
// client prefix-<worker> of its own, and returns the answers that were not
// want(n) for the worker's n-th call, counted by what they were.
func outageLoad(s *server, domain, prefix string, workers, calls int, want func(n int) outcome) map[string]int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wrong = map[string]int{}
	)
	for w := range workers {
		wg.Go(func() {
			for n := range calls {
				got, err := callOutcome(s, domain, fmt.Sprintf("%s-%d", prefix, w))
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
	return wrong
}

// awaitRedisDecides waits until s decides on Redis r again: a call for a
// new client of domain is admitted and wrote its one key.
func awaitRedisDecides(t *testing.T, s *server, r *redistest.Server, domain, prefix string) {
	t.Helper()
	rc := r.Client(t)
	n := 0
	eventually.True(t, "decisions come from Redis again", func() (bool, string) {
		n++
		v := fmt.Sprintf("%s%d", prefix, n)
		got, err := callOutcome(s, domain, v)
		if err != nil || got != outOK {
			return false, fmt.Sprintf("%v %v", got, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		keys, err := rc.Keys(ctx, "*client:"+v+":*").Result()
		return err == nil && len(keys) == 1, fmt.Sprintf("keys for %s: %v %v", v, keys, err)
	})
}

// TestRedisFailureModes kills or freezes Redis under a bounded load, for
// every --redis-failure-mode: each call gets what the mode promises, no call
// hangs, the circuit breaker opens, /readyz fails in mode error only, and
// everything recovers without a restart when Redis returns.
func TestRedisFailureModes(t *testing.T) {
	t.Parallel()
	for _, m := range failureModes() {
		for _, f := range outages() {
			t.Run(m.mode+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				r := redistest.Standalone(t)
				s := startServer(t, serveOpts{
					ConfigDir: rulesDir(t, map[string]string{"fm.yaml": clientRules("fm")}),
					Args: []string{"--redis-url", "redis://" + r.Addr, "--redis-failure-mode", m.mode,
						"--redis-timeout=200ms", "--expected-replicas=2"},
				})
				if got, err := callOutcome(s, "fm", "warm"); err != nil || got != outOK {
					t.Fatalf("with Redis up: %v, %v; want OK", got, err)
				}
				before := s.scrape()
				baseGoroutines := before.get("go_goroutines", nil)

				f.brk(r, t)
				broken := true
				defer func() {
					if broken && f.name == "hung" {
						r.Resume(t) // a frozen process would outlive cleanup's kill wait otherwise
					}
				}()
				const clients, perClient = 8, 4
				if wrong := outageLoad(s, "fm", "down", clients, perClient, m.want); len(wrong) > 0 {
					t.Errorf("with Redis %s, %d clients × %d calls: wrong outcomes %v", f.name, clients, perClient, wrong)
				}
				after := s.scrape()
				if d := after.get("envoy_rls_backend_failure_mode_total", map[string]string{"mode": m.mode}) -
					before.get("envoy_rls_backend_failure_mode_total", map[string]string{"mode": m.mode}); d != clients*perClient {
					t.Errorf("envoy_rls_backend_failure_mode_total{mode=%q} moved by %v, want %d (every call of the outage)", m.mode, d, clients*perClient)
				}
				// After a few failures the breaker answers without
				// trying Redis, so a dead Redis costs calls nothing.
				open := map[string]string{"kind": "circuit_open"}
				if d := after.get("envoy_rls_backend_errors_total", open) - before.get("envoy_rls_backend_errors_total", open); d <= 0 {
					t.Errorf("envoy_rls_backend_errors_total{kind=\"circuit_open\"} did not move after %d failed calls: the breaker never opened", clients*perClient)
				}
				if m.mode == "error" {
					// Every call would fail here; another replica may
					// have a working Redis.
					s.awaitReadyz(t, "/readyz reports the backend", http.StatusServiceUnavailable, "backend")
				} else if code, body := s.get("/readyz"); code != 200 {
					// The operator chose an answer without Redis, and all
					// replicas share it: pulling them all out would
					// replace that answer with connection errors.
					t.Errorf("/readyz with --redis-failure-mode=%s and Redis %s: %d %q, want 200", m.mode, f.name, code, body)
				}

				f.mend(r, t)
				broken = false
				awaitRedisDecides(t, s, r, "fm", "back")
				s.awaitReadyz(t, "/readyz recovers", http.StatusOK, "")
				s.awaitGoroutines(t, baseGoroutines, 20)
				s.stop()
			})
		}
	}
}
