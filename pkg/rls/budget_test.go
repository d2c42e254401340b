package rls

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// budgetStep is one call of a budget test: a descriptor of hits (-1: a
// check-only request, hits_addend 0; 0: no addend, cost 1) and the answer.
type budgetStep struct {
	advance   time.Duration
	hits      int64
	code      pb.RateLimitResponse_Code
	remaining uint32
	// reset is the duration_until_reset wanted, when not 0.
	reset time.Duration
}

// budgetDesc is the descriptor of st on key=value.
func budgetDesc(st budgetStep) *ratelimitv3.RateLimitDescriptor {
	d := desc("user=a")
	switch {
	case st.hits < 0:
		d.HitsAddend = wrapperspb.UInt64(0)
	case st.hits > 0:
		d.HitsAddend = wrapperspb.UInt64(uint64(st.hits))
	}
	return d
}

// runBudget runs steps against rules on every store (in-process and
// Redis) and checks each answer.
func runBudget(t *testing.T, yaml string, steps []budgetStep) {
	t.Helper()
	for _, be := range compatBackends {
		t.Run(be.name, func(t *testing.T) {
			clk := &clock{t: epoch}
			backend, prefix := be.new(t)
			domain := prefix + "budget"
			snap := rulestest.Snapshot(t, "budget.yaml", withDomain(t, yaml, "budget", domain), rules.Options{})
			s := newService(t, snap, Config{Backend: backend, Now: clk.Now})
			for i, st := range steps {
				clk.Advance(st.advance)
				st2 := call(t, s, request(domain, budgetDesc(st))).GetStatuses()[0]
				if st2.GetCode() != st.code || st2.GetLimitRemaining() != st.remaining {
					t.Fatalf("step %d (hits %d): %s remaining %d, want %s remaining %d", i, st.hits, st2.GetCode(), st2.GetLimitRemaining(), st.code, st.remaining)
				}
				if got := st2.GetDurationUntilReset().AsDuration(); st.reset != 0 && got != st.reset {
					t.Fatalf("step %d (hits %d): duration_until_reset %v, want %v", i, st.hits, got, st.reset)
				}
			}
		})
	}
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

// TestCheckOnlyOverdrawn (issue 38, item 1): a counter past its limit
// (6 of 5, charged) is denied to a check-only request, as
// envoyproxy/ratelimit denies it; so is a spent one (5 of 5), where the
// reference still admits (docs/migrating.md).
func TestCheckOnlyOverdrawn(t *testing.T) {
	runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: fixed_window, cost: charge}
`, []budgetStep{
		{hits: 4, code: ok, remaining: 1},
		{hits: -1, code: ok, remaining: 1},
		{hits: 1, code: ok, remaining: 0},
		// Spent: a check-only request is denied, as one hit would be.
		{hits: -1, code: over, remaining: 0},
		// A charge past the limit is counted: 6 of 5.
		{hits: 1, code: over, remaining: 0},
		{hits: -1, code: over, remaining: 0},
		// The next hour starts clean.
		{advance: time.Hour, hits: -1, code: ok, remaining: 5},
	})
}

// TestChargePastTheLimit (issue 38, item 2): on a budget of 1000 an hour
// (the default algorithm), a charge of 900 with 200 left is counted,
// and every later request is denied until the budget is paid back; on a
// `cost: request` limit the same charge is refused and dropped, as before.
func TestChargePastTheLimit(t *testing.T) {
	t.Run("charge", func(t *testing.T) {
		runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000, cost: charge}
`, []budgetStep{
			{hits: 800, code: ok, remaining: 200},
			{hits: 900, code: over, remaining: 0},
			{hits: -1, code: over, remaining: 0},
			{advance: 30 * time.Minute, hits: 0, code: over, remaining: 0},
			// The default sliding window: the overdraft (1701 of 1000)
			// fades out over the next hour.
			{advance: 2 * time.Hour, hits: -1, code: ok, remaining: 1000},
		})
	})
	t.Run("request", func(t *testing.T) {
		runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
`, []budgetStep{
			{hits: 800, code: ok, remaining: 200},
			{hits: 900, code: over, remaining: 200},
			{hits: -1, code: ok, remaining: 200},
		})
	})
}

// TestResetWholeSeconds (issue 38, item 4): duration_until_reset is the
// time to the window's end rounded up to whole seconds, which Envoy's
// X-RateLimit-Reset then carries as is: 49.7 s left is 50, never 49.
func TestResetWholeSeconds(t *testing.T) {
	runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
`, []budgetStep{
		{advance: 10*time.Second + 300*time.Millisecond, hits: 1, code: ok, remaining: 4, reset: 50 * time.Second},
		{advance: 700 * time.Millisecond, hits: 1, code: ok, remaining: 3, reset: 49 * time.Second},
		{advance: time.Microsecond, hits: 1, code: ok, remaining: 2, reset: 49 * time.Second},
	})
}

// TestResetOfFreshAndBlocked (issue 38, item 5): a check-only request on a
// fresh counter, and any request on a limit of 0, report the time to the
// end of the window, as envoyproxy/ratelimit does, not 0.
func TestResetOfFreshAndBlocked(t *testing.T) {
	t.Run("fresh", func(t *testing.T) {
		runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: fixed_window}
`, []budgetStep{
			{advance: time.Minute, hits: -1, code: ok, remaining: 5, reset: 59 * time.Minute},
		})
	})
	t.Run("blocked", func(t *testing.T) {
		runBudget(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 0}
`, []budgetStep{
			{advance: time.Minute, hits: 0, code: over, remaining: 0, reset: 59 * time.Minute},
			{advance: time.Minute, hits: -1, code: over, remaining: 0, reset: 58 * time.Minute},
			{advance: time.Second, hits: 0, code: over, remaining: 0, reset: 58*time.Minute - time.Second},
		})
	})
}

// TestChargeMetrics: charges and the hits they count past the limit are
// counted per rule and limit.
func TestChargeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, `
domain: budget
descriptors:
  - key: user
    rate_limit: {name: tokens, unit: hour, requests_per_unit: 1000, cost: charge}
`, func(c *Config) { c.Metrics = NewMetrics(reg) })
	for _, hits := range []int64{800, 900, 50, -1} {
		call(t, s, request("budget", budgetDesc(budgetStep{hits: hits})))
	}
	const labels = "domain=budget,limit=tokens,rule=tokens"
	if got := counterValues(t, reg, "envoy_rls_charged_hits_total")[labels]; got != 1750 {
		t.Errorf("charged hits %v, want 1750", got)
	}
	// 900 with 200 left: 700 past the limit; then 50 more.
	if got := counterValues(t, reg, "envoy_rls_overdraft_hits_total")[labels]; got != 750 {
		t.Errorf("overdraft hits %v, want 750", got)
	}
}
