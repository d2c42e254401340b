package rlqs

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

// TestRLQSExampleValidates: Envoy accepts the shipped RLQS example.
func TestRLQSExampleValidates(t *testing.T) {
	if err := envoytest.Validate(t, "rlqs-example", childproc.ReadRepoFile(t, "examples/rlqs/envoy.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestRLQSBlanketRules: a blocked rule makes Envoy deny all, an unlimited
// one allow all, and both hold for every request once assigned.
func TestRLQSBlanketRules(t *testing.T) {
	g := startRig(t, 1, "")
	for _, tc := range []struct {
		path, name, kind string
		want             int
	}{
		{"/admin", "admin", "deny_all", http.StatusTooManyRequests},
		{"/health", "health", "allow_all", http.StatusOK},
	} {
		// The first request creates the bucket (and Envoy's first report).
		g.get(0, tc.path, "")
		g.waitAssigned(t, tc.name+" assigned", tc.name, "", 4*reportInterval, func(as map[string]assignment) bool {
			return as["edge-1"].Kind == tc.kind
		})
		got := map[int]int{}
		for i := 0; i < 20; i++ {
			got[g.get(0, tc.path, "")]++
		}
		if got[tc.want] != 20 {
			t.Errorf("%s (%s): got %v, want 20x%d", tc.path, tc.kind, got, tc.want)
		}
		// The live explain of the bucket's descriptor shows the assignment.
		qs := g.explainQuotas(t, tc.name)
		if len(qs) != 1 || qs[0].Instance != "edge-1" || qs[0].Kind != tc.kind {
			t.Errorf("explain name=%s: rlqs assignments %+v, want edge-1's %s", tc.name, qs, tc.kind)
		}
	}
	// Every spelling of the blocked path is blocked: Envoy's :path carries
	// the query, and an upstream may resolve "//", %2F and dot segments,
	// so examples/rlqs/envoy.yaml normalizes the path and its matchers
	// match the whole of it. /health/../admin is not the unlimited bucket.
	for _, p := range []string{"/admin?x=1", "/admin/", "/admin/x?y=1", "//admin", "/admin%2Fx", "/health/../admin", "/health/..%2Fadmin", "/health%2F..%2Fadmin"} {
		if code := g.get(0, p, ""); code != http.StatusTooManyRequests {
			t.Errorf("GET %s: %d, want 429 like /admin", p, code)
		}
	}
	// The replica's metrics count the assignments, the stream and what
	// Envoy reported.
	metrics := g.metrics(t, 0)
	for _, want := range []string{
		`envoy_rls_rlqs_assignments_sent_total{domain="rlqs-example",kind="deny_all",rule="rlqs-example.name_admin"}`,
		`envoy_rls_rlqs_assignments_sent_total{domain="rlqs-example",kind="allow_all",rule="rlqs-example.name_health"}`,
		`envoy_rls_rlqs_reported_requests_total{domain="rlqs-example",outcome="allowed",rule="rlqs-example.name_health"}`,
		"envoy_rls_rlqs_streams 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// SIGTERM with Envoy's stream open: the drain ends the stream instead
	// of waiting out --shutdown-timeout for it.
	if code := g.Replicas[0].Stop(); code != 0 {
		t.Errorf("envoy-rls exited with %d after SIGTERM", code)
	}
	if logs := g.Replicas[0].Logs.String(); strings.Contains(logs, "did not finish in time") {
		t.Errorf("shutdown waited for the RLQS stream:\n%s", logs)
	}
}

// TestRLQSRedisOutage: with Redis down, Envoys keep their last token
// bucket until its TTL, then get the failure mode (allow, the default),
// and are back on shares once Redis returns.
func TestRLQSRedisOutage(t *testing.T) {
	g := startRig(t, 1, "")
	l := g.startLoad(0, 3*limit, 2*time.Minute)
	defer l.Stop()
	g.waitAssigned(t, "a token bucket", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return as["edge-1"].Kind == "token_bucket"
	})
	g.Redis.Kill(t)
	down := time.Now()
	// Still enforcing: over the first 8 s at most the limit (+ one
	// bucket), and some: the token bucket, not a deny all.
	time.Sleep(8 * time.Second)
	got := g.Upstreams[0].Between(down, time.Now())
	t.Logf("Redis down, last assignment kept: admitted %d in 8 s at 3x the 20/s limit", got)
	if got == 0 || got > 8*limit+limit+5 {
		t.Errorf("Redis down: admitted %d in 8 s, want 1..%d: the last assignment (20/s) enforced", got, 8*limit+limit+5)
	}
	g.waitAssigned(t, "failure mode", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return as["edge-1"].Kind == "allow_all"
	})
	t.Logf("failure mode (allow all) sent %v after Redis went down (TTL 15 s)", time.Since(down).Round(time.Second))
	time.Sleep(time.Second)
	from := time.Now()
	time.Sleep(5 * time.Second)
	if got := g.Upstreams[0].Between(from, time.Now()); got <= 5*limit+limit {
		t.Errorf("failure mode allow: admitted %d in 5 s at 3x the limit, want more than the limit", got)
	}
	g.Redis.Start(t)
	g.waitAssigned(t, "shares again", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return as["edge-1"].Kind == "token_bucket"
	})
}

// limit is the example rule's api_per_client limit, per second.
const limit = 20

// TestRLQSSharedLimit runs three Envoys at five times the example's 20/s
// limit for one client, over two envoy-rls replicas on one Redis, and
// checks what their upstreams admit: steady state, an idle Envoy's share
// moving to the busy ones, a rule change, an override and a replica
// restart.
func TestRLQSSharedLimit(t *testing.T) {
	g := startRig(t, 3, "")
	all := []string{"edge-1", "edge-2", "edge-3"}
	perEnvoy := 5 * limit / 3 // 5x overload in total
	loads := make([]*load, 3)
	for i := range loads {
		loads[i] = g.startLoad(i, perEnvoy+1, 4*time.Minute)
		defer loads[i].Stop()
	}
	admitted := func(from, to time.Time, envoys ...int) int {
		n := 0
		for _, i := range envoys {
			n += g.Upstreams[i].Between(from, to)
		}
		return n
	}
	within := func(what string, got int, want float64, tol float64) {
		t.Helper()
		lo, hi := want*(1-tol), want*(1+tol)
		t.Logf("%s: admitted %d, want %.0f (%.0f..%.0f)", what, got, want, lo, hi)
		if float64(got) < lo || float64(got) > hi {
			t.Errorf("%s: admitted %d, want within ±%.0f%% of %.0f", what, got, tol*100, want)
		}
	}
	// settled measures what all Envoys admit over 10 s, starting 2 s on:
	// a changed token bucket starts full in Envoy, so let that pass.
	settled := func(what string, perSecond, tol float64) {
		t.Helper()
		time.Sleep(2 * time.Second)
		from := time.Now()
		time.Sleep(10 * time.Second)
		to := time.Now()
		within(what, admitted(from, to, 0, 1, 2), perSecond*to.Sub(from).Seconds(), tol)
	}

	// Steady state: every Envoy holds a token bucket, the shares sum to
	// the limit. Then one more report so none is still settling.
	took := g.waitAssigned(t, "three shares", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return tokenSum(as, all...) == limit && as["edge-1"].Instances == 3
	})
	t.Logf("three Envoys share the limit after %v", took)
	time.Sleep(reportInterval)
	from := time.Now()
	time.Sleep(30 * time.Second)
	to := time.Now()
	within("3 Envoys, 30 s at 5x overload", admitted(from, to, 0, 1, 2), limit*to.Sub(from).Seconds(), 0.10)

	// One Envoy idle: the busy ones get its share.
	loads[2].Stop()
	took = g.waitAssigned(t, "idle share moved", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return tokenSum(as, "edge-1", "edge-2") >= limit-1
	})
	t.Logf("idle Envoy's share moved to the busy ones after %v (two reporting intervals: %v)", took, 2*reportInterval)
	if took > 2*reportInterval+2*time.Second {
		t.Logf("note: slower than two reporting intervals on this machine")
	}
	time.Sleep(2 * time.Second) // fresh token buckets start full: let that pass
	from = time.Now()
	time.Sleep(10 * time.Second)
	to = time.Now()
	within("2 busy Envoys after the third went idle", admitted(from, to, 0, 1), (limit-1)*to.Sub(from).Seconds(), 0.15)
	loads[2] = g.startLoad(2, perEnvoy+1, 3*time.Minute)

	// Rule change: 20/s becomes 10/s.
	rules := string(childproc.ReadRepoFile(t, "examples/rlqs/config/rlqs.yaml"))
	changed := strings.Replace(rules, "requests_per_unit: 20", "requests_per_unit: 10", 1)
	if changed == rules {
		t.Fatal("example rules no longer have requests_per_unit: 20")
	}
	g.writeRules(t, changed)
	took = g.waitAssigned(t, "rule change", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return tokenSum(as, all...) == 10
	})
	t.Logf("rule change assigned to all Envoys after %v", took)
	settled("after the rule change to 10/s", 10, 0.15)

	// Override: the limit named api_per_client set to 30/s.
	g.setOverride(t, `{"domain":"rlqs-example","limit":"api_per_client","requests_per_unit":30,"ttl":"10m","reason":"rlqs test"}`)
	took = g.waitAssigned(t, "override", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		return tokenSum(as, all...) == 30
	})
	t.Logf("override assigned to all Envoys after %v", took)
	settled("after the override to 30/s", 30, 0.15)

	// A replica killed: edge-2's replica. Envoy keeps enforcing its last
	// assignment, then reconnects to the restarted replica.
	before := g.assignments(t, "api", "alice")["edge-2"]
	g.Replicas[1].Kill()
	from = time.Now()
	time.Sleep(3 * time.Second)
	to = time.Now()
	got := admitted(from, to, 1)
	// At most its rate for the time plus one full bucket; at least some.
	maxGot := float64(before.TokensPerFill)*to.Sub(from).Seconds() + float64(before.MaxTokens) + 2
	t.Logf("edge-2 with its replica down: admitted %d in %v (share %d/s, at most %.0f)", got, to.Sub(from).Round(time.Millisecond), before.TokensPerFill, maxGot)
	if got == 0 || float64(got) > maxGot {
		t.Errorf("edge-2 with its replica down admitted %d, want 1..%.0f: it must keep enforcing its last assignment", got, maxGot)
	}
	g.Replicas[1].Restart()
	restarted := time.Now()
	took = g.waitAssigned(t, "edge-2 reconnected", "api", "alice", 6*reportInterval, func(as map[string]assignment) bool {
		a, ok := as["edge-2"]
		return ok && a.Sent.After(restarted) && tokenSum(as, all...) == 30
	})
	t.Logf("edge-2 reconnected and was assigned after %v", took)
	settled("after the replica restart", 30, 0.15)
	for i, l := range loads {
		l.Stop()
		t.Logf("edge-%d: sent %d, 200 %d, 429 %d, other %d", i+1, l.sent.Load(), l.okCount.Load(), l.denied.Load(), l.errs.Load())
	}
}
