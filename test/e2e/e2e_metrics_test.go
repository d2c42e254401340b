package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

const metricsRules = `
domain: metered
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: hour
      requests_per_unit: 2
      algorithm: token_bucket
  - key: path
    rate_limit:
      unit: hour
      requests_per_unit: 1000000
`

// TestMetricsCounters scrapes /metrics around OK and OVER_LIMIT decisions.
func TestMetricsCounters(t *testing.T) {
	t.Parallel()
	s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"metered.yaml": metricsRules})})
	before := s.scrape()
	for range 3 { // 2 OK, 1 OVER_LIMIT
		s.ask("metered", desc("user", "alice"))
	}
	s.ask("unknown-domain", desc("user", "alice"))
	after := s.scrape()

	tests := []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"envoy_rls_requests_total", map[string]string{"domain": "metered", "code": "ok"}, 2},
		{"envoy_rls_requests_total", map[string]string{"domain": "metered", "code": "over_limit"}, 1},
		// An unknown domain must not become a label value of its own.
		{"envoy_rls_requests_total", map[string]string{"domain": "_unknown", "code": "ok"}, 1},
		{"envoy_rls_limit_decisions_total", map[string]string{"domain": "metered", "rule": "per_user", "limit": "per_user", "algorithm": "token_bucket", "code": "ok", "shadow": "false"}, 2},
		{"envoy_rls_limit_decisions_total", map[string]string{"domain": "metered", "rule": "per_user", "limit": "per_user", "algorithm": "token_bucket", "code": "over_limit", "shadow": "false"}, 1},
		{"envoy_rls_request_duration_seconds_count", map[string]string{"domain": "metered"}, 3},
	}
	for _, tt := range tests {
		if d := after.get(tt.name, tt.labels) - before.get(tt.name, tt.labels); d != tt.delta {
			t.Errorf("%s: moved by %v, want %v", seriesKey(tt.name, tt.labels), d, tt.delta)
		}
	}
	if testVersion != "" {
		if v := after.get("envoy_rls_build_info", map[string]string{"version": testVersion}); v != 1 {
			t.Errorf("envoy_rls_build_info{version=%q} = %v, want 1; series: %v", testVersion, v, filterNames(after, "envoy_rls_build_info"))
		}
	}
	if v := reloads(after, "success"); v != 1 {
		t.Errorf("envoy_rls_config_reloads_total{result=\"success\"} = %v after start, want 1", v)
	}
	s.stop()
}

func filterNames(m metrics, prefix string) []string {
	var out []string
	for _, n := range m.names() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// TestMetricsCardinality sends 10 000 distinct descriptor values (and
// unknown domains) and shows that the number of series does not grow: label
// values come from the rules, never from requests.
func TestMetricsCardinality(t *testing.T) {
	t.Parallel()
	s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"metered.yaml": metricsRules})})

	// Warm up every series the load below may touch: both codes of the
	// limited rule, the unlimited-in-practice rule, an unknown domain.
	for range 3 {
		s.ask("metered", desc("user", "warmup"))
	}
	s.ask("metered", desc("path", "/warmup"))
	s.ask("metered", desc("nomatch", "warmup"))
	s.ask("unknown-warmup", desc("user", "warmup"))
	base := s.scrape()

	const (
		total   = 10000
		workers = 8
		marker  = "card-9f3c"
	)
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout*2)
	defer cancel()
	client := s.rls()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				v := fmt.Sprintf("%s-%d", marker, i)
				req := &pb.RateLimitRequest{Domain: "metered", Descriptors: descsFor(i, v)}
				if i%10 == 9 {
					req.Domain = "unknown-" + v
				}
				if _, err := client.ShouldRateLimit(ctx, req); err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", n, total, firstErr)
	}
	if n := next.Load(); n < total {
		t.Fatalf("only %d of %d requests sent before the deadline", n, total)
	}

	code, body := s.get("/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	if strings.Contains(body, marker) {
		t.Errorf("/metrics contains a descriptor value or domain sent by a client (%q)", marker)
	}
	after, err := parseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, n := range after.names() {
		if _, ok := base[n]; !ok {
			added = append(added, n)
		}
	}
	if len(after) != len(base) || len(added) > 0 {
		t.Errorf("series grew from %d to %d after %d distinct values; new series (first 10): %v", len(base), len(after), total, added[:min(10, len(added))])
	}
	// The load was really counted, so the series above were live.
	moved := after.get("envoy_rls_requests_total", map[string]string{"domain": "metered", "code": "ok"}) -
		base.get("envoy_rls_requests_total", map[string]string{"domain": "metered", "code": "ok"})
	if moved != total*9/10 {
		t.Errorf("envoy_rls_requests_total{domain=metered,code=ok} moved by %v, want %d", moved, total*9/10)
	}
	s.stop()
}

// descsFor spreads the values over a limited rule, a second rule and an
// unmatched descriptor.
func descsFor(i int64, v string) []*rlv3.RateLimitDescriptor {
	switch i % 3 {
	case 0:
		return []*rlv3.RateLimitDescriptor{desc("user", v)}
	case 1:
		return []*rlv3.RateLimitDescriptor{desc("path", "/"+v)}
	}
	return []*rlv3.RateLimitDescriptor{desc("nomatch", v), desc("user", v)}
}
