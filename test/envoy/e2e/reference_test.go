package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/refproc"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
)

// commonRules are rules for envoy.yaml's descriptors in the form both
// envoyproxy/ratelimit and envoy-rls read: none of envoy-rls's extensions
// (algorithm, burst, on_limit, ...), fixed windows of an hour, so that no
// window edge falls inside the test (see awayFromHourEdge).
const commonRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: remote_address
    value: 127.0.0.66
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: user_id
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: tier
    value: partner
    descriptors:
      - key: user_id
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /api/orders
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /healthz
    rate_limit: {unlimited: true}
  - key: header_match
    value: write
    descriptors:
      - key: user_id
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 3}
`

// commonSequence is the requests both Envoys get, in order; each touches
// one rule of commonRules (and the per-address one).
func commonSequence() []request {
	var seq []request
	add := func(n int, r request) {
		for range n {
			seq = append(seq, r)
		}
	}
	add(4, request{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.51"})
	add(3, request{Path: "/api/orders", From: "127.0.0.52"})
	add(5, request{Path: "/hello", From: "127.0.0.53", Header: map[string]string{"x-user-id": "u1"}})
	add(5, request{Path: "/hello", From: "127.0.0.54", Header: map[string]string{"x-user-id": "p1", "x-api-tier": "partner"}})
	add(3, request{Path: "/healthz", From: "127.0.0.55"})
	add(2, request{Path: "/", From: "127.0.0.66"})
	add(3, request{Method: http.MethodPost, Path: "/api/items", From: "127.0.0.56", Header: map[string]string{"x-user-id": "w1"}})
	add(10, request{Path: "/hello", From: "127.0.0.57"})
	// The partner user again, without the tier: only user_id (4 an hour)
	// applies, of which the partner requests admitted used 3.
	add(1, request{Path: "/hello", From: "127.0.0.58", Header: map[string]string{"x-user-id": "p1"}})
	return seq
}

// awayFromHourEdge waits, when the next full hour is near, until it has
// passed, so that the sequence runs inside one hour's windows.
func awayFromHourEdge() time.Time {
	now := time.Now()
	if next := now.Truncate(time.Hour).Add(time.Hour); next.Sub(now) < 90*time.Second {
		time.Sleep(time.Until(next) + time.Second)
	}
	return time.Now()
}

// writeRuntimeRules lays the rule file out as the reference reads it.
func writeRuntimeRules(t *testing.T, rules string) (root string) {
	t.Helper()
	root = t.TempDir()
	dir := refproc.RulesDir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRules(t, dir, map[string]string{"edge.yaml": rules})
	return root
}

// seen is what a client's answer shows of the rate limit.
func seen(a answer) string {
	if a.Err != nil {
		return "error: " + a.Err.Error()
	}
	return fmt.Sprintf("%d ratelimited=%q limit=%q remaining=%q", a.Status,
		a.Header.Get("x-envoy-ratelimited"), a.Header.Get("x-ratelimit-limit"), a.Header.Get("x-ratelimit-remaining"))
}

// behindEnvoys starts envoyproxy/ratelimit and envoy-rls in drop-in mode
// (the binary started as ratelimit, on the reference's environment plus
// extraEnv for both), each on its own Redis behind its own Envoy running
// envoy.yaml, with the same rule file.
func behindEnvoys(t *testing.T, rules string, extraEnv ...string) (ref, rls *stack) {
	t.Helper()
	refBin, err := refproc.Binary()
	if err != nil {
		t.Fatal(err)
	}
	refRedis, rlsRedis := redistest.Standalone(t), redistest.Standalone(t)

	refProc := refproc.Start(t, refBin, writeRuntimeRules(t, rules), refRedis.Addr, extraEnv...)
	ref = &stack{Upstream: startUpstream(t), Redis: refRedis}
	// The same Envoy config for both: envoy.yaml, patient.
	envoyOpts := stackOpts{Bootstrap: withFilter(t, patient)}
	ref.Envoy, ref.URL = startEnvoy(t, envoyOpts, refProc.GRPCAddr, ref.Upstream.Addr)

	// Ports 0 in the environment: envoy-rls logs the ones it got.
	dropIn := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binPath, dropIn); err != nil {
		t.Fatal(err)
	}
	env := append(refproc.Env(writeRuntimeRules(t, rules), rlsRedis.Addr, 0, 0, 0), extraEnv...)
	rls = &stack{RLS: rlsproc.Start(t, dropIn, nil, env), Upstream: startUpstream(t), Redis: rlsRedis}
	if !strings.Contains(rls.RLS.Logs.String(), "drop-in mode") {
		t.Fatalf("envoy-rls started as ratelimit did not say it runs in drop-in mode; logs:\n%s", rls.RLS.Logs)
	}
	rls.Envoy, rls.URL = startEnvoy(t, envoyOpts, rls.RLS.GRPCAddr, rls.Upstream.Addr)
	return ref, rls
}

// TestReferenceBehindEnvoy: the clients of two Envoys running envoy.yaml,
// one asking envoyproxy/ratelimit and one envoy-rls in drop-in mode (with
// the same rule file and environment), see the same answers, request by
// request: the status, x-envoy-ratelimited, and the x-ratelimit-limit and
// -remaining headers Envoy builds from the statuses each service returns.
// Both count a denied request's hits on every limit of the request unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (envoy-rls: every limit
// that names no cost is cost: charge in drop-in mode), and neither does
// with it, so the answers are the same all three ways. The denied
// partner requests show it: the reference has counted their hits on
// user_id too (4 an hour, 0 left), so Envoy names that limit first, and
// the partner user's follow-up finds user_id used up (5 of 4).
func TestReferenceBehindEnvoy(t *testing.T) {
	seq := commonSequence()
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false", []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}},
		{"unset", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, rls := behindEnvoys(t, commonRules, tc.env...)
			start := awayFromHourEdge()
			var refSeen []string
			limited := 0
			for i, r := range seq {
				a, b := seen(ref.do(r)), seen(rls.do(r))
				refSeen = append(refSeen, a)
				if a != b {
					t.Errorf("request %d (%s %s from %s %v): reference %s, envoy-rls %s", i, r.Method, r.Path, r.From, r.Header, a, b)
				}
				if strings.HasPrefix(a, "429 ") {
					limited++
				}
			}
			if !start.Truncate(time.Hour).Equal(time.Now().Truncate(time.Hour)) {
				t.Fatal("the sequence ran across an hour's edge; run again")
			}
			t.Logf("the reference's answers:\n%s", strings.Join(refSeen, "\n"))
			// The sequence must reach the limits, or equal answers prove little.
			if limited < 9 {
				t.Errorf("the reference limited %d requests, want at least 9", limited)
			}
		})
	}
}
