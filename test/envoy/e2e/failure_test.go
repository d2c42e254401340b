package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// Envoy counts the rate-limit filter's outcomes under the route's target
// cluster (cluster.<cluster>.ratelimit.*); the shipped routes all go to
// echo. Its own calls to envoy-rls are counted under the envoy_rls
// cluster: a call its filter timeout cut is upstream_rq_timeout there.
const (
	rlOK          = "cluster.echo.ratelimit.ok"
	rlOverLimit   = "cluster.echo.ratelimit.over_limit"
	rlError       = "cluster.echo.ratelimit.error"
	rlFailAllowed = "cluster.echo.ratelimit.failure_mode_allowed"
	rlsTimeouts   = "cluster.envoy_rls.upstream_rq_timeout"
	rlsAnswered   = "cluster.envoy_rls.upstream_rq_200"
)

// envoyCounters reads Envoy's counters (0 when unused) by name.
func (s *stack) envoyCounters(t testing.TB, names ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range names {
		out[n] = s.envoyStat(t, n)
	}
	return out
}

// since is the change of each counter from before.
func since(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// The uptime monitor's stand-in address: the shipped rules never limit it,
// so its traffic only shows whether Envoy let a request through.
const monitorAddr = "127.0.0.10"

// loginSequence sends six logins from one address and returns the statuses:
// login_per_minute (5 a minute) makes it [200 200 200 200 200 429] when
// envoy-rls decides.
func (s *stack) loginSequence(t testing.TB, from string) string {
	t.Helper()
	var got []int
	for range 6 {
		got = append(got, s.mustDo(t, request{Method: http.MethodPost, Path: "/api/login", From: from}).Status)
	}
	return fmt.Sprint(got)
}

const loginsLimited = "[200 200 200 200 200 429]"

// TestEnvoyRLSKilledUnderTraffic: envoy-rls is killed while a client sends
// through Envoy, then restarted on the same port. With failure_mode_deny
// false (as shipped) every request passes while it is down, and Envoy
// counts each as ratelimit.error and ratelimit.failure_mode_allowed; with
// true each of those requests gets Envoy's error status, 500, or the
// filter's status_on_error. Afterwards the same Envoy, never restarted,
// enforces the limits again.
func TestEnvoyRLSKilledUnderTraffic(t *testing.T) {
	for _, tc := range []struct {
		deny          bool
		statusOnError int // 0: unset
		errStatus     int // what a request envoy-rls could not decide gets
	}{
		{false, 0, http.StatusOK},
		{true, 0, http.StatusInternalServerError},
		{true, http.StatusServiceUnavailable, http.StatusServiceUnavailable},
	} {
		for _, st := range stores {
			name := fmt.Sprintf("failure_mode_deny=%v/%s", tc.deny, st)
			if tc.statusOnError != 0 {
				name = fmt.Sprintf("failure_mode_deny=%v,status_on_error=%d/%s", tc.deny, tc.statusOnError, st)
			}
			t.Run(name, func(t *testing.T) {
				s := startStack(t, stackOpts{Store: st, FixedGRPCPort: true,
					Bootstrap: withFilter(t, func(f map[string]any) {
						if f["failure_mode_deny"] != false {
							t.Fatalf("envoy.yaml's failure_mode_deny is %v, want false as documented", f["failure_mode_deny"])
						}
						f["failure_mode_deny"] = tc.deny
						if tc.statusOnError != 0 {
							f["status_on_error"] = map[string]any{"code": tc.statusOnError}
						}
						patient(f)
					})})
				envoyPid, err := s.Envoy.Pid()
				if err != nil {
					t.Fatal(err)
				}
				if got := s.loginSequence(t, "127.0.0.31"); got != loginsLimited {
					t.Fatalf("logins before the kill: %s, want %s", got, loginsLimited)
				}

				names := []string{rlOK, rlError, rlFailAllowed}
				before := s.envoyCounters(t, names...)
				tr := s.startTraffic(request{Path: "/hello", From: monitorAddr})
				waitFor(t, "traffic through Envoy", func() bool { return tr.Len() >= 5 })
				s.RLS.Kill()
				waitFor(t, "Envoy counting ratelimit.error while envoy-rls is down", func() bool {
					return s.envoyStat(t, rlError)-before[rlError] >= 10
				})
				s.RLS.Restart()
				okAtRestart := s.envoyStat(t, rlOK)
				waitFor(t, "Envoy reaching the restarted envoy-rls", func() bool {
					return s.envoyStat(t, rlOK)-okAtRestart >= 10
				})
				answers := tr.Stop()
				d := since(before, s.envoyCounters(t, names...))
				counts := statusCounts(answers)
				t.Logf("%d requests: statuses %v; Envoy: %v", len(answers), counts, d)

				if counts[0] != 0 {
					t.Errorf("%d requests failed at the transport", counts[0])
				}
				if d[rlError] < 10 {
					t.Errorf("ratelimit.error rose by %d, want at least 10", d[rlError])
				}
				if tc.deny {
					if counts[tc.errStatus] != int(d[rlError]) || counts[http.StatusOK] != len(answers)-int(d[rlError]) {
						t.Errorf("statuses %v with %d errors, want a %d for each error and 200 for the rest", counts, d[rlError], tc.errStatus)
					}
					if d[rlFailAllowed] != 0 {
						t.Errorf("ratelimit.failure_mode_allowed rose by %d with failure_mode_deny, want 0", d[rlFailAllowed])
					}
				} else {
					if counts[http.StatusOK] != len(answers) {
						t.Errorf("statuses %v, want every request to pass (fail open)", counts)
					}
					if d[rlFailAllowed] != d[rlError] {
						t.Errorf("ratelimit.failure_mode_allowed rose by %d, ratelimit.error by %d: want each error let through", d[rlFailAllowed], d[rlError])
					}
				}

				if got := s.loginSequence(t, "127.0.0.32"); got != loginsLimited {
					t.Errorf("logins after the restart: %s, want %s", got, loginsLimited)
				}
				if pid, err := s.Envoy.Pid(); err != nil || pid != envoyPid {
					t.Errorf("Envoy is process %d (%v), want the same %d throughout", pid, err, envoyPid)
				}
			})
		}
	}
}

// TestRedisHungWithinFilterTimeout: Redis hangs (SIGSTOP: connections stay
// open, nothing answers). With --redis-timeout (100ms) below the filter's
// timeout (0.25s in envoy.yaml), envoy-rls answers every call itself, by
// its --redis-failure-mode, before Envoy gives up on it: Envoy's calls to
// envoy-rls all complete and none is cut by its timeout, and what the
// client sees is the mode's answer. No latency is measured: a call Envoy
// had to cut would show as upstream_rq_timeout and as ratelimit.error.
func TestRedisHungWithinFilterTimeout(t *testing.T) {
	const n = 10
	for _, tc := range []struct {
		mode   string
		status int
		// counter is the Envoy outcome each request must add to.
		counter string
	}{
		// UNAVAILABLE: Envoy's failure_mode_deny: false lets it through.
		{"error", http.StatusOK, rlFailAllowed},
		{"allow", http.StatusOK, rlOK},
		{"deny", http.StatusTooManyRequests, rlOverLimit},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			s := startStack(t, stackOpts{Store: onRedis,
				ServeArgs: []string{"--redis-timeout=100ms", "--redis-failure-mode=" + tc.mode}})
			const client = "127.0.0.41" // per_ip: 50 a second, bursts of 100
			if a := s.mustDo(t, request{Path: "/hello", From: client}); a.Status != http.StatusOK {
				t.Fatalf("before the hang: %v, want 200", a)
			}
			if d := s.rlsCounter(t, "envoy_rls_limit_decisions_total", map[string]string{"limit": "per_ip", "code": "ok"}); d != 1 {
				t.Fatalf("per_ip decided %v requests with Redis up, want 1", d)
			}

			names := []string{rlOK, rlOverLimit, rlError, rlFailAllowed, rlsTimeouts, rlsAnswered}
			before := s.envoyCounters(t, names...)
			answeredBefore := s.rlsCounter(t, "envoy_rls_backend_failure_mode_total", map[string]string{"mode": tc.mode})
			s.Redis.Pause(t)
			resumed := false
			t.Cleanup(func() {
				if !resumed {
					s.Redis.Resume(t)
				}
			})
			var got []int
			for range n {
				got = append(got, s.mustDo(t, request{Path: "/hello", From: client}).Status)
			}
			d := since(before, s.envoyCounters(t, names...))
			byMode := s.rlsCounter(t, "envoy_rls_backend_failure_mode_total", map[string]string{"mode": tc.mode}) - answeredBefore
			s.Redis.Resume(t)
			resumed = true
			t.Logf("statuses %v; Envoy %v; envoy-rls answered %v by mode %s", got, d, byMode, tc.mode)

			for i, st := range got {
				if st != tc.status {
					t.Errorf("request %d with Redis hung: %d, want %d", i, st, tc.status)
				}
			}
			if d[rlsTimeouts] != 0 || d[rlsAnswered] != n {
				t.Errorf("Envoy's calls to envoy-rls: %d answered, %d cut by the filter timeout; want all %d answered", d[rlsAnswered], d[rlsTimeouts], n)
			}
			if d[tc.counter] != n {
				t.Errorf("%s rose by %d, want %d", tc.counter, d[tc.counter], n)
			}
			if tc.mode != "error" && d[rlError] != 0 {
				t.Errorf("ratelimit.error rose by %d, want 0: envoy-rls answered every call", d[rlError])
			}
			if byMode != n {
				t.Errorf("envoy_rls_backend_failure_mode_total{mode=%q} rose by %v, want %d", tc.mode, byMode, n)
			}

			// Redis back: the limits are enforced again once the breaker
			// closes; each try is a fresh client address.
			try := 0
			waitFor(t, "limits enforced after Redis resumed", func() bool {
				try++
				return s.loginSequence(t, fmt.Sprintf("127.0.%d.%d", 1+try/250, 1+try%250)) == loginsLimited
			})
		})
	}
}
