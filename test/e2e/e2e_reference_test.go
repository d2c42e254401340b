package e2e

import (
	"net/http"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/upstream"
)

// referenceRules mixes envoyproxy/ratelimit's wildcard and share_threshold
// test cases with a one- and a two-level rule.
const referenceRules = `
domain: ref
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: tenant
    value: acme
    descriptors:
      - key: path
        shadow_mode: true
        rate_limit:
          unit: hour
          requests_per_unit: 1
`

// TestReferenceMetricsAndRLConfig runs the binary as a deployment of
// envoyproxy/ratelimit moved over would (fixed windows, the reference's
// metrics asked for through the environment), then scrapes /metrics for
// the reference's per-limit series and reads /rlconfig on the debug port.
func TestReferenceMetricsAndRLConfig(t *testing.T) {
	t.Parallel()
	s := startServer(t, serveOpts{
		ConfigDir: rulesDir(t, map[string]string{"ref.yaml": referenceRules}),
		Env:       []string{"ENVOY_RLS_REFERENCE_METRICS=true", "ENVOY_RLS_DEFAULT_ALGORITHM=fixed_window"},
	})
	codes := []pb.RateLimitResponse_Code{}
	for _, v := range []string{"/api/v1", "/api-beta-v1", "/apiXYZv1"} {
		codes = append(codes, s.ask("ref", desc("midpath", v)).GetOverallCode())
	}
	for range 3 {
		codes = append(codes, s.ask("ref", desc("user", "alice")).GetOverallCode())
	}
	for range 2 {
		codes = append(codes, s.ask("ref", desc("tenant", "acme", "path", "/x")).GetOverallCode())
	}
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	// The three paths share one counter of 2; the shadow rule never denies.
	wantCodes := []pb.RateLimitResponse_Code{ok, ok, over, ok, ok, over, ok, ok}
	for i := range wantCodes {
		if codes[i] != wantCodes[i] {
			t.Fatalf("overall codes %v, want %v", codes, wantCodes)
		}
	}

	m := s.scrape()
	series := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "ref", "key1": "user", "key2": ""}, 3},
		{"ratelimit_service_rate_limit_within_limit", map[string]string{"domain": "ref", "key1": "user", "key2": ""}, 2},
		{"ratelimit_service_rate_limit_near_limit", map[string]string{"domain": "ref", "key1": "user", "key2": ""}, 1},
		{"ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "ref", "key1": "user", "key2": ""}, 1},
		{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "ref", "key1": "midpath_/api*v1", "key2": ""}, 3},
		{"ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "ref", "key1": "midpath_/api*v1", "key2": ""}, 1},
		// Two levels: the reference's exporter maps them to no labels.
		{"ratelimit_service_rate_limit_ref_tenant_acme_path_total_hits", map[string]string{}, 2},
		{"ratelimit_service_rate_limit_ref_tenant_acme_path_over_limit", map[string]string{}, 1},
		{"ratelimit_service_rate_limit_ref_tenant_acme_path_shadow_mode", map[string]string{}, 1},
	}
	for _, sr := range series {
		if got := m.get(sr.name, sr.labels); got != sr.want {
			t.Errorf("%s = %v, want %v; reference series: %v", seriesKey(sr.name, sr.labels), got, sr.want, filterNames(m, "ratelimit_service_rate_limit"))
		}
	}

	const wantRLConfig = "ref.user: unit=MINUTE requests_per_unit=2, shadow_mode: false\n" +
		"ref.midpath_/api*v1: unit=MINUTE requests_per_unit=2, shadow_mode: false\n" +
		"ref.tenant_acme.path: unit=HOUR requests_per_unit=1, shadow_mode: true\n"
	if code, body := s.getDebug("/rlconfig"); code != http.StatusOK || body != wantRLConfig {
		t.Errorf("GET /rlconfig on the debug port: %d\n%s\nwant 200\n%s", code, body, wantRLConfig)
	}
	if code, _ := s.get("/rlconfig"); code != http.StatusNotFound {
		t.Errorf("GET /rlconfig on the HTTP port: %d, want 404 (debug endpoints stay off it)", code)
	}
	s.stop()
}

// TestCountDeniedHitsLikeReference replays envoyproxy/ratelimit's README
// example 2 against the binary started with ENVOY_RLS_COUNT_DENIED_HITS:
// the sixth marketing message is denied by its 5 a day, and still counts
// against the number's 100 a day, as the reference counts it.
func TestCountDeniedHitsLikeReference(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  []string
		left uint32 // the number's remaining after the denied sixth request
	}{
		{[]string{"ENVOY_RLS_DEFAULT_ALGORITHM=fixed_window"}, 95},
		{[]string{"ENVOY_RLS_DEFAULT_ALGORITHM=fixed_window", "ENVOY_RLS_COUNT_DENIED_HITS=true"}, 94},
	}
	for _, tt := range tests {
		s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"messaging.yaml": upstream.Example2}), Env: tt.env})
		var resp *pb.RateLimitResponse
		for range 6 {
			resp = s.ask("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111"))
		}
		st := resp.GetStatuses()
		if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || st[0].GetCode() != pb.RateLimitResponse_OVER_LIMIT ||
			st[1].GetCode() != pb.RateLimitResponse_OK || st[1].GetLimitRemaining() != tt.left {
			t.Errorf("%v: sixth request %v, want OVER_LIMIT by marketing and the number OK with %d left", tt.env, resp, tt.left)
		}
		s.stop()
	}
}
