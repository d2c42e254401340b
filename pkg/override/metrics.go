package override

import (
	"github.com/prometheus/client_golang/prometheus"
)

// activeCollector exports the overrides in force, counted at scrape time
// from the index the request path reads, so the gauge cannot disagree
// with what is applied (an override past its expiry is not counted even
// before the next refresh drops it).
type activeCollector struct {
	t    *Table
	desc *prometheus.Desc
}

func newActiveCollector(t *Table) activeCollector {
	return activeCollector{t: t, desc: prometheus.NewDesc("envoy_rls_overrides_active",
		"Runtime limit overrides in force on this replica, by source (manual, adaptive).", []string{"source"}, nil)}
}

func (c activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c activeCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.t.cfg.Now()
	counts := map[Source]int{Manual: 0, Adaptive: 0}
	for _, s := range c.t.cur.Load().by {
		for _, o := range []*Override{s.manual, s.adaptive} {
			if o != nil && o.live(now) {
				counts[o.Source]++
			}
		}
	}
	for _, src := range []Source{Manual, Adaptive} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[src]), string(src))
	}
}
