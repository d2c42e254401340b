package rls

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// loginRules has a sliding_log rule, whose memory is one entry per hit.
const loginRules = `
domain: d
descriptors:
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_log}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: fixed_window}
`

func overrideDesc(kv string, rpu uint32, unit typev3.RateLimitUnit, hits uint64) *ratelimitv3.RateLimitDescriptor {
	d := desc(kv)
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	return d
}

func expectInvalid(t *testing.T, s *Service, req *pb.RateLimitRequest, want string) {
	t.Helper()
	_, err := s.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want InvalidArgument containing %q", err, want)
	}
}

// TestRequestCost is issue 10's hostile request: 64 descriptors on the
// sliding_log rule, each overriding the limit to 10000 per YEAR with
// hits_addend 10000, would add 640,000 log entries. It is refused before
// anything is written, and an ordinary request still passes.
func TestRequestCost(t *testing.T) {
	s, _ := newTestService(t, loginRules, nil)
	var descs []*ratelimitv3.RateLimitDescriptor
	for range 64 {
		descs = append(descs, overrideDesc("login=victim", 10_000, typev3.RateLimitUnit_YEAR, 10_000))
	}
	expectInvalid(t, s, request("d", descs...), "cost 640000 above the limit 1000")

	// Nothing was written: the log of login=victim still has room for
	// every hit of its configured limit.
	expectStatus(t, call(t, s, request("d", desc("login=victim"))).Statuses[0], want{pb.RateLimitResponse_OK, 99})

	// The cost counts one per limit, and one per logged hit.
	at := desc("login=other")
	at.HitsAddend = wrapperspb.UInt64(100)
	onBudget, _ := newTestService(t, loginRules, func(c *Config) { c.MaxRequestCost = 101 })
	expectStatus(t, call(t, onBudget, request("d", at, desc("api=1"))).Statuses[0], want{pb.RateLimitResponse_OK, 0})
	expectInvalid(t, onBudget, request("d", at, desc("api=1"), desc("api=2")), "cost 102 above the limit 101")
}

// TestOverrideBounds: an override obeys every bound a rule obeys.
func TestOverrideBounds(t *testing.T) {
	s, _ := newTestService(t, loginRules, func(c *Config) { c.SlidingLogCap = 500 })
	huge := overrideDesc("api=1", 1, typev3.RateLimitUnit_YEAR, 0)
	huge.Limit.UnitMultiplier = wrapperspb.UInt32(1 << 31)
	for _, tc := range []struct {
		name string
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{"sliding-log cap", overrideDesc("login=a", 501, typev3.RateLimitUnit_MINUTE, 0), "sliding_log limit 501 above the cap 500"},
		{"unit", overrideDesc("login=a", 5, typev3.RateLimitUnit_UNKNOWN, 0), "unknown unit UNKNOWN"},
		{"period overflow", huge, "descriptors[0].limit: period of 2147483648 YEAR is longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectInvalid(t, s, request("d", tc.d), tc.want) })
	}
	expectStatus(t, call(t, s, request("d", overrideDesc("login=a", 500, typev3.RateLimitUnit_MINUTE, 0))).Statuses[0], want{pb.RateLimitResponse_OK, 499})
}

// TestOverridePolicy: operators can bound overrides to lowering a limit, or
// turn them off.
func TestOverridePolicy(t *testing.T) {
	lower := overrideDesc("api=1", 10, typev3.RateLimitUnit_MINUTE, 0)      // 10/min < 60/min
	higher := overrideDesc("api=2", 2, typev3.RateLimitUnit_SECOND, 0)      // 120/min > 60/min
	equal := overrideDesc("api=3", 3600, typev3.RateLimitUnit_HOUR, 0)      // 60/min
	unmatched := overrideDesc("other=1", 5, typev3.RateLimitUnit_MINUTE, 0) // no rule
	for _, tc := range []struct {
		policy  OverridePolicy
		want    [4]uint32 // remaining after one hit: lower, higher, equal, unmatched
		ignored float64
	}{
		{OverridesAllow, [4]uint32{9, 1, 3599, 4}, 0},
		{OverridesLowerOnly, [4]uint32{9, 59, 3599, 0}, 2},
		{OverridesIgnore, [4]uint32{59, 59, 59, 0}, 4},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			parsed, err := ParseOverridePolicy(tc.policy.String())
			if err != nil || parsed != tc.policy {
				t.Fatalf("ParseOverridePolicy(%q) = %v, %v", tc.policy, parsed, err)
			}
			m := NewMetrics(prometheus.NewRegistry())
			s, _ := newTestService(t, loginRules, func(c *Config) { c.Overrides, c.Metrics = tc.policy, m })
			resp := call(t, s, request("d", lower, higher, equal, unmatched))
			if got := testutil.ToFloat64(m.ignored.WithLabelValues("d")); got != tc.ignored {
				t.Errorf("envoy_rls_limit_overrides_ignored_total = %v, want %v", got, tc.ignored)
			}
			for i, w := range tc.want {
				if got := resp.Statuses[i].GetLimitRemaining(); got != w {
					t.Errorf("descriptor %d: remaining %d, want %d", i, got, w)
				}
			}
		})
	}
	if _, err := ParseOverridePolicy("sometimes"); err == nil || !strings.Contains(err.Error(), "allow|lower-only|ignore") {
		t.Fatalf("ParseOverridePolicy(sometimes) = %v", err)
	}
}
