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

	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// failureRules: 4 per hour per client; "local" with 2 expected replicas
// allows 2 per replica while Redis is away.
const failureRules = `
domain: fm
descriptors:
  - key: client
    rate_limit:
      name: per_client
      unit: hour
      requests_per_unit: 4
      algorithm: token_bucket
`

// outcome is what one call returned, reduced to what a failure mode
// promises.
type outcome string

const (
	outOK          outcome = "OK"
	outOverLimit   outcome = "OVER_LIMIT"
	outUnavailable outcome = "UNAVAILABLE"
)

func callOutcome(s *server, value string) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "fm", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", value)}})
	switch {
	case status.Code(err) == codes.Unavailable:
		return outUnavailable, nil
	case err != nil:
		// Deadline exceeded here means a call waited 10 s on a dead Redis
		// configured with a 200 ms timeout: the bound failed.
		return "", err
	}
	return outcome(resp.GetOverallCode().String()), nil
}

// TestRedisFailureModes kills or freezes Redis under a bounded load, for
// every --redis-failure-mode: each call gets what the mode promises, no call
// hangs, the circuit breaker opens, /readyz fails in mode error only, and
// everything recovers without a restart when Redis returns.
func TestRedisFailureModes(t *testing.T) {
	t.Parallel()
	modes := []struct {
		mode string
		// want is the outcome of the n-th (0-based) call for one client
		// while Redis is away.
		want func(n int) outcome
	}{
		{"error", func(int) outcome { return outUnavailable }},
		{"allow", func(int) outcome { return outOK }},
		{"deny", func(int) outcome { return outOverLimit }},
		{"local", func(n int) outcome { // 4 per hour / 2 replicas
			if n < 2 {
				return outOK
			}
			return outOverLimit
		}},
	}
	faults := []struct {
		name    string
		break_  func(r *redistest.Server, t testing.TB)
		recover func(r *redistest.Server, t testing.TB)
	}{
		{"killed", (*redistest.Server).Kill, (*redistest.Server).Start},
		{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume},
	}
	for _, m := range modes {
		for _, f := range faults {
			t.Run(m.mode+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				r := redistest.Standalone(t)
				s := startServer(t, serveOpts{
					ConfigDir: rulesDir(t, map[string]string{"fm.yaml": failureRules}),
					Args: []string{"--redis-url", "redis://" + r.Addr, "--redis-failure-mode", m.mode,
						"--redis-timeout=200ms", "--expected-replicas=2"},
				})
				if got, err := callOutcome(s, "warm"); err != nil || got != outOK {
					t.Fatalf("with Redis up: %v, %v; want OK", got, err)
				}
				before := s.scrape()
				baseGoroutines := before.get("go_goroutines", nil)

				f.break_(r, t)
				broken := true
				defer func() {
					if broken && f.name == "hung" {
						r.Resume(t) // a frozen process would outlive cleanup's kill wait otherwise
					}
				}()
				const clients, perClient = 8, 4
				var (
					wg     sync.WaitGroup
					mu     sync.Mutex
					wrong  = map[string]int{} // "got X, want Y" → count
					sample []string
				)
				for c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := range perClient {
							got, err := callOutcome(s, fmt.Sprintf("down-%d", c))
							if err == nil && got == m.want(n) {
								continue
							}
							mu.Lock()
							if err != nil {
								wrong["error"]++
								sample = append(sample, err.Error())
							} else {
								wrong[fmt.Sprintf("call %d: got %s, want %s", n, got, m.want(n))]++
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				if len(wrong) > 0 {
					t.Errorf("with Redis %s, %d clients × %d calls: wrong outcomes %v; errors: %.3q", f.name, clients, perClient, wrong, sample)
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

				f.recover(r, t)
				broken = false
				rc := r.Client(t)
				n := 0
				eventually.True(t, "decisions come from Redis again", func() (bool, string) {
					n++
					v := fmt.Sprintf("back%d", n)
					got, err := callOutcome(s, v)
					if err != nil || got != outOK {
						return false, fmt.Sprintf("%v %v", got, err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					defer cancel()
					keys, err := rc.Keys(ctx, "*client:"+v+":*").Result()
					return err == nil && len(keys) == 1, fmt.Sprintf("keys for %s: %v %v", v, keys, err)
				})
				s.awaitReadyz(t, "/readyz recovers", http.StatusOK, "")
				s.awaitGoroutines(t, baseGoroutines, 20)
				s.stop()
			})
		}
	}
}
