package e2e

import (
	"net/http"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// TestUsePrometheusReferenceNames: USE_PROMETHEUS=true serves, on
// PROMETHEUS_ADDR, the names envoyproxy/ratelimit's exporter gives its
// stats: per limit, per call and per rule load.
func TestUsePrometheusReferenceNames(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	s := startAsRatelimit(t, refEnv(t, r.Addr, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"))
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := s.ask("ref", desc("slow", "x")).OverallCode; got != want {
			t.Fatalf("request %d: %s, want %s", i+1, got, want)
		}
	}
	addr := logField(s.logs.String(), "serving metrics", "metrics_addr")
	code, body := getURL("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("PROMETHEUS_ADDR /metrics: %d %s", code, body)
	}
	m, err := parseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	slow := map[string]string{"domain": "ref", "key1": "slow", "key2": ""}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ratelimit_service_rate_limit_total_hits", slow, 3},
		{"ratelimit_service_rate_limit_over_limit", slow, 1},
		{"ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"}, 3},
		{"ratelimit_service_response_time_seconds_count", map[string]string{"grpc_method": "ShouldRateLimit"}, 3},
		{"ratelimit_service_should_rate_limit_error", map[string]string{"err_type": "redis_error"}, 0},
		{"ratelimit_service_config_load_success", nil, 1},
		{"ratelimit_service_config_load_error", nil, 0},
	} {
		key := seriesKey(c.name, c.labels)
		if got, ok := m[key]; !ok || got != c.want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, c.want)
		}
	}
}
