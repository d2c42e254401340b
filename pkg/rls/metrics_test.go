package rls

import (
	"sort"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// counterValues gathers reg's counters named name, keyed by their labels
// as `k=v,…` in label-name order.
func counterValues(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[labelKey(m.GetLabel())] = m.GetCounter().GetValue()
		}
	}
	return out
}

func labelKey(labels []*dto.LabelPair) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.GetName() + "=" + l.GetValue()
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// TestDecisionMetrics checks envoy_rls_limit_decisions_total: one series
// per limit, even for the limits of one descriptor, and a code that says
// whether the limit's hits were applied.
func TestDecisionMetrics(t *testing.T) {
	const yaml = `
domain: m
descriptors:
  - key: user
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 2, algorithm: fixed_window}
      - {unit: day, requests_per_unit: 100, algorithm: fixed_window}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}
  - key: trial
    shadow_mode: true
    rate_limit: {name: trial, unit: second, requests_per_unit: 1, algorithm: fixed_window}
`
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, yaml, func(c *Config) { c.Metrics = NewMetrics(reg) })
	// user twice alone: both limits ok. Then user with tenant: the second
	// tenant request denies, and user's limits, which would admit, are not
	// applied. Then trial over its shadow limit with user: user applies.
	call(t, s, request("m", desc("user=a")))
	call(t, s, request("m", desc("tenant=t"), desc("user=b")))
	call(t, s, request("m", desc("tenant=t"), desc("user=b")))
	call(t, s, request("m", desc("trial=x")))
	call(t, s, request("m", desc("trial=x"), desc("user=c")))

	lbl := func(rule, limit, code, shadow string) string {
		return "algorithm=fixed_window,code=" + code + ",domain=m,limit=" + limit + ",rule=" + rule + ",shadow=" + shadow
	}
	want := map[string]float64{
		lbl("m.user", "per_second", "ok", "false"):              3,
		lbl("m.user", "rate_limits[1]", "ok", "false"):          3,
		lbl("m.user", "per_second", "not_applied", "false"):     1,
		lbl("m.user", "rate_limits[1]", "not_applied", "false"): 1,
		lbl("m.tenant", "rate_limit", "ok", "false"):            1,
		lbl("m.tenant", "rate_limit", "over_limit", "false"):    1,
		lbl("trial", "trial", "ok", "true"):                     1,
		lbl("trial", "trial", "over_limit", "true"):             1,
	}
	got := counterValues(t, reg, "envoy_rls_limit_decisions_total")
	for k, v := range want {
		if got[k] != v {
			t.Errorf("envoy_rls_limit_decisions_total{%s} = %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series envoy_rls_limit_decisions_total{%s} = %v", k, v)
		}
	}
}

// TestReferenceMetrics checks envoyproxy/ratelimit's per-limit counters:
// their names, the labels its default Prometheus mapping gives keys one,
// two and three levels deep, and how a request's hits split between
// within_limit, near_limit, over_limit and shadow_mode there.
func TestReferenceMetrics(t *testing.T) {
	const yaml = `
domain: ref
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: method
        descriptors:
          - key: ip
            rate_limit: {unit: minute, requests_per_unit: 100}
`
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, yaml, func(c *Config) {
		c.DefaultAlgorithm = algo.FixedWindow
		c.ReferenceMetrics = NewReferenceMetrics(reg, 0.8)
	})
	steps := []struct {
		hits  uint32
		descs []*ratelimitv3.RateLimitDescriptor
	}{
		{7, []*ratelimitv3.RateLimitDescriptor{desc("user=a")}}, // 7 within
		{2, []*ratelimitv3.RateLimitDescriptor{desc("user=a")}}, // 9: 2 within, 1 near (8 is the threshold)
		{3, []*ratelimitv3.RateLimitDescriptor{desc("user=a")}}, // 12 > 10: denied, 2 over, 1 near
		{1, []*ratelimitv3.RateLimitDescriptor{desc("user=a")}}, // 9 left as is: 1 within, 1 near
		{1, []*ratelimitv3.RateLimitDescriptor{desc("user=a")}}, // 10 used: denied, all over
		{1, []*ratelimitv3.RateLimitDescriptor{desc("trial=x")}},
		{1, []*ratelimitv3.RateLimitDescriptor{desc("trial=x")}}, // over, shadow
		{1, []*ratelimitv3.RateLimitDescriptor{desc("tenant=acme", "path=/x")}},
		{1, []*ratelimitv3.RateLimitDescriptor{desc("tenant=acme", "method=GET", "ip=1")}},
	}
	for _, st := range steps {
		req := request("ref", st.descs...)
		req.HitsAddend = st.hits
		call(t, s, req)
	}
	mapped := func(stat, key1 string) (string, string) {
		return "ratelimit_service_rate_limit_" + stat, "domain=ref,key1=" + key1 + ",key2="
	}
	want := []struct {
		name, labels string
		v            float64
	}{}
	add := func(name, labels string, v float64) {
		want = append(want, struct {
			name, labels string
			v            float64
		}{name, labels, v})
	}
	for stat, v := range map[string]float64{"total_hits": 14, "within_limit": 10, "near_limit": 3, "over_limit": 3, "shadow_mode": 0} {
		n, l := mapped(stat, "user")
		add(n, l, v)
	}
	for stat, v := range map[string]float64{"total_hits": 2, "within_limit": 1, "near_limit": 1, "over_limit": 1, "shadow_mode": 1} {
		n, l := mapped(stat, "trial")
		add(n, l, v)
	}
	// Two levels: no mapping, so the escaped name without labels.
	add("ratelimit_service_rate_limit_ref_tenant_acme_path_total_hits", "", 1)
	add("ratelimit_service_rate_limit_ref_tenant_acme_path_within_limit", "", 1)
	// Three levels: the regex mapping's domain, key1 and key2.
	add("ratelimit_service_rate_limit_total_hits", "domain=ref,key1=tenant_acme,key2=method", 1)
	add("ratelimit_service_rate_limit_within_limit", "domain=ref,key1=tenant_acme,key2=method", 1)
	for _, w := range want {
		got, ok := counterValues(t, reg, w.name)[w.labels]
		if !ok || got != w.v {
			t.Errorf("%s{%s} = %v (present %v), want %v", w.name, w.labels, got, ok, w.v)
		}
	}
}

// TestReferenceMetricsCountDenied: when a charge is counted past its
// limit (cost: charge, as --count-denied-hits makes it), the reference's
// counters split the denied hits by the count before, as the reference
// does.
func TestReferenceMetricsCountDenied(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, `
domain: ref
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, cost: charge}
`, func(c *Config) {
		c.ReferenceMetrics = NewReferenceMetrics(reg, 0.8)
	})
	for _, hits := range []uint32{7, 5, 1} { // 7 within; 12: 2 over, 2 near; then 1 over
		req := request("ref", desc("user=a"))
		req.HitsAddend = hits
		call(t, s, req)
	}
	for stat, want := range map[string]float64{"total_hits": 13, "within_limit": 7, "near_limit": 2, "over_limit": 3} {
		if got := counterValues(t, reg, "ratelimit_service_rate_limit_"+stat)["domain=ref,key1=user,key2="]; got != want {
			t.Errorf("%s = %v, want %v", stat, got, want)
		}
	}
}

// TestReferenceMetricsShadowBlockCharge: a shadow-mode rule of 0 whose
// limit is a charge (drop-in mode's default) counts nothing, and the
// reference's shadow_mode and over_limit stats still count its hits, as
// Envoy Gateway's statsd_exporter expects.
func TestReferenceMetricsShadowBlockCharge(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, `
domain: ref
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0, cost: charge}
`, func(c *Config) { c.ReferenceMetrics = NewReferenceMetrics(reg, 0.8) })
	for range 2 {
		call(t, s, request("ref", desc("user=a")))
	}
	for stat, want := range map[string]float64{"total_hits": 2, "shadow_mode": 2, "over_limit": 2, "within_limit": 0} {
		if got := counterValues(t, reg, "ratelimit_service_rate_limit_"+stat)["domain=ref,key1=user,key2="]; got != want {
			t.Errorf("%s = %v, want %v", stat, got, want)
		}
	}
}
