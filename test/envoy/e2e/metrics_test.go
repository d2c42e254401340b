package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"
)

// limitDecisions sums envoy-rls's envoy_rls_limit_decisions_total for the
// named limit and code (ok, over_limit, not_applied) over every other label.
func (s *stack) limitDecisions(t testing.TB, limit, code string) float64 {
	t.Helper()
	return s.rlsCounter(t, "envoy_rls_limit_decisions_total", map[string]string{"limit": limit, "code": code})
}

// scrape reads envoy-rls's /metrics.
func (s *stack) scrape(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + s.RLS.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape envoy-rls: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse envoy-rls metrics: %v", err)
	}
	return fams
}

// envoyStat reads one of Envoy's counters (0 when Envoy has not used it).
func (s *stack) envoyStat(t testing.TB, name string) int64 {
	t.Helper()
	stats, err := s.Envoy.Stats(name)
	if err != nil {
		t.Fatal(err)
	}
	return stats[name]
}

func (a answer) String() string {
	if a.Err != nil {
		return a.Err.Error()
	}
	return fmt.Sprintf("%d %v", a.Status, a.Header)
}

// rlsCounter sums envoy-rls's counter family over the series whose labels
// include every pair of match.
func (s *stack) rlsCounter(t testing.TB, family string, match map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, m := range s.scrape(t)[family].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range match {
			ok = ok && labels[k] == v
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
