package e2e

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// shopRules has one limit per algorithm family the scenarios exercise.
// Periods are long (an hour, a day) so that no window rolls and no token
// refills in the middle of a burst on a slow machine.
const shopRules = `
domain: shop
descriptors:
  - key: client
    rate_limit:
      name: per_client
      unit: hour
      requests_per_unit: 5
      algorithm: token_bucket
  - key: user
    rate_limit:
      name: per_user
      unit: day
      requests_per_unit: 3
      algorithm: sliding_window
  - key: plan
    value: free
    rate_limit:
      unit: minute
      unit_multiplier: 30
      requests_per_unit: 2
`

// shopDir returns a fresh rules directory holding shopRules.
func shopDir(t *testing.T) string {
	t.Helper()
	return rulesDir(t, map[string]string{"shop.yaml": shopRules})
}

// startShop starts envoy-rls serving shopRules on the in-process store,
// with args added to its flags.
func startShop(t *testing.T, args ...string) *server {
	t.Helper()
	return startServer(t, serveOpts{ConfigDir: shopDir(t), Args: args})
}

// burstCase is one limit of shopRules driven to exhaustion.
type burstCase struct {
	name  string
	key   string
	rule  string
	limit uint32
	unit  pb.RateLimitResponse_RateLimit_Unit
	// period bounds duration_until_reset, allowed or denied: the
	// sliding window's newest hit leaving the period (its sub-window's end
	// plus a period, at most a period and one of its 30 sub-windows), the
	// refill of the whole bucket.
	period time.Duration
}

var burstCases = []burstCase{
	{name: "token_bucket", key: "client", rule: "per_client", limit: 5, unit: pb.RateLimitResponse_RateLimit_HOUR,
		period: time.Hour},
	{name: "sliding_window", key: "user", rule: "per_user", limit: 3, unit: pb.RateLimitResponse_RateLimit_DAY,
		period: 24*time.Hour + 24*time.Hour/30},
}

// runBurst drives every burstCase on s to its limit and one past it, then
// checks that two descriptors give two statuses in order and that a denied
// request consumes nothing (docs/architecture.md#all-or-nothing). value makes the
// descriptors unique to the caller.
func runBurst(t *testing.T, s *server, value string) {
	t.Helper()
	for _, c := range burstCases {
		for i := range c.limit {
			resp := s.ask("shop", desc(c.key, value))
			st := onlyStatus(t, resp)
			if resp.GetOverallCode() != pb.RateLimitResponse_OK || st.GetCode() != pb.RateLimitResponse_OK {
				t.Fatalf("%s: request %d of %d: got %v, want OK", c.name, i+1, c.limit, resp)
			}
			checkLimit(t, c, st)
			if want := c.limit - 1 - i; st.GetLimitRemaining() != want {
				t.Errorf("%s: request %d: limit_remaining %d, want %d", c.name, i+1, st.GetLimitRemaining(), want)
			}
			if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > c.period {
				t.Errorf("%s: request %d: duration_until_reset %v, want in (0, %v]", c.name, i+1, d, c.period)
			}
		}
		resp := s.ask("shop", desc(c.key, value))
		st := onlyStatus(t, resp)
		if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || st.GetCode() != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: request %d: got %v, want OVER_LIMIT", c.name, c.limit+1, resp)
		}
		checkLimit(t, c, st)
		if st.GetLimitRemaining() != 0 {
			t.Errorf("%s: over the limit: limit_remaining %d, want 0", c.name, st.GetLimitRemaining())
		}
		if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > c.period {
			t.Errorf("%s: over the limit: duration_until_reset %v, want in (0, %v]", c.name, d, c.period)
		}
	}

	// Two descriptors, two statuses, in request order: the exhausted
	// token bucket, then a fresh sliding window, then an unmatched one.
	fresh := value + "-fresh"
	resp := s.ask("shop", desc("client", value), desc("user", fresh), desc("nothing", "matches"))
	if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("mixed request: overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	want := []struct {
		code  pb.RateLimitResponse_Code
		limit uint32 // 0: no current_limit
	}{
		{pb.RateLimitResponse_OVER_LIMIT, 5},
		{pb.RateLimitResponse_OK, 3},
		{pb.RateLimitResponse_OK, 0},
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("mixed request: %d statuses, want %d: %v", len(resp.GetStatuses()), len(want), resp)
	}
	for i, w := range want {
		st := resp.GetStatuses()[i]
		if st.GetCode() != w.code || st.GetCurrentLimit().GetRequestsPerUnit() != w.limit {
			t.Errorf("mixed request: status %d = %v, want code %v with requests_per_unit %d", i, st, w.code, w.limit)
		}
	}
	// The denied request must not have consumed the fresh user's quota.
	st := onlyStatus(t, s.ask("shop", desc("user", fresh)))
	if st.GetCode() != pb.RateLimitResponse_OK || st.GetLimitRemaining() != 2 {
		t.Errorf("after a denied request: fresh user status %v, want OK with limit_remaining 2 (nothing consumed)", st)
	}

	// A limit with unit_multiplier and the server's default algorithm.
	for i := range 3 {
		st := onlyStatus(t, s.ask("shop", desc("plan", "free")))
		wantCode := pb.RateLimitResponse_OK
		if i == 2 {
			wantCode = pb.RateLimitResponse_OVER_LIMIT
		}
		l := st.GetCurrentLimit()
		if st.GetCode() != wantCode || l.GetRequestsPerUnit() != 2 || l.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE ||
			l.GetUnitMultiplier().GetValue() != 30 {
			t.Errorf("plan=free request %d: %v, want %v with 2 per 30 minutes", i+1, st, wantCode)
		}
	}
}

func onlyStatus(t *testing.T, resp *pb.RateLimitResponse) *pb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	if len(resp.GetStatuses()) != 1 {
		t.Fatalf("got %d statuses, want 1: %v", len(resp.GetStatuses()), resp)
	}
	return resp.GetStatuses()[0]
}

func checkLimit(t *testing.T, c burstCase, st *pb.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	l := st.GetCurrentLimit()
	if l.GetRequestsPerUnit() != c.limit || l.GetUnit() != c.unit || l.GetName() != c.rule {
		t.Errorf("%s: current_limit %v, want %d per %v named %q", c.name, l, c.limit, c.unit, c.rule)
	}
}

// TestMemoryBurst runs the burst scenario on the in-process store.
func TestMemoryBurst(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	runBurst(t, s, "mem")
	s.stop()
}
