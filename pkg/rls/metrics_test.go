package rls

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
