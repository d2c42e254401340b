package rls

import (
	"math"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// ReferenceMetrics counts each limit's hits as envoyproxy/ratelimit does,
// under the names and labels its Prometheus exporter (USE_PROMETHEUS=true,
// with its default statsd mapping) gives them, so that dashboards built on
// it keep working:
//
//	ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode}
//
// The reference names each stat ratelimit.service.rate_limit.<key>.<stat>,
// where <key> is the rule's path (rules.Rule.Path: "domain.key_value.key"),
// and its default mapping turns that into labels by the key's depth: one
// level gives {domain, key1}; three or more give {domain, key1, key2} taken
// by its greedy regex (so a fourth level is dropped, and a fifth joins the
// domain); two match no mapping, and the exporter then exports the stat
// under its escaped name without labels
// (ratelimit_service_rate_limit_domain_key_value_key_total_hits). Here the
// one-level series carry key2="" as well, which Prometheus treats as no
// label, because one metric family must have one label set.
//
// The counts follow the reference's: total_hits every hit of a matched
// limit; within_limit the hits of an admitted request; over_limit the hits
// beyond the limit, and near_limit those between NearLimitRatio of it and
// the limit (a request crossing both is split); shadow_mode the hits of a
// shadow_mode rule that would have been denied. Each limit is classed by
// its own decision, as the reference has no all-or-nothing: a limit that
// admits inside a request another limit denies counts as within_limit.
// Label values come from configuration only. Not counted: unlimited rules
// and per-request limit overrides (whose reference key holds the request's
// values), and detailed_metric and value_to_metric, which would put
// request values into names.
//
// It is safe for concurrent use.
type ReferenceMetrics struct {
	nearRatio float64
	series    series[string, *refSeries]
	// svc counts per call and per rule load (refservice.go).
	svc refService
}

// refStats lists the per-limit stats in the reference's order.
var refStats = [...]string{"total_hits", "within_limit", "near_limit", "over_limit", "shadow_mode"}

const (
	refTotal = iota
	refWithin
	refNear
	refOver
	refShadow
)

// refSeries is one rule's counters and how the exporter names them.
type refSeries struct {
	counts [len(refStats)]atomic.Uint64
	// labels are domain, key1, key2, or nil when the key matches no
	// mapping and names holds the escaped name of each stat.
	labels []string
	names  [len(refStats)]string
	// statsd are the reference's statsd names of the stats, below its
	// "ratelimit" scope.
	statsd [len(refStats)]string
}

// refMappedPrefix is the name of the mapped families, before the stat.
const refMappedPrefix = "ratelimit_service_rate_limit_"

// refDeepKey is the reference's default mapping of keys three levels deep
// or more, applied to the key alone (the stat suffix it also matches is
// fixed); greedy like the exporter's regexp.
var refDeepKey = regexp.MustCompile(`^(.*)\.(.*)\.(.*)(\..*)$`)

func newRefSeries(path string) *refSeries {
	s := &refSeries{}
	for i, st := range refStats {
		s.statsd[i] = "service.rate_limit." + sanitizeStatName(path) + "." + st
	}
	switch parts := strings.Split(path, "."); {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		s.labels = []string{parts[0], parts[1], ""}
	case refDeepKey.MatchString(path):
		m := refDeepKey.FindStringSubmatch(path)
		s.labels = []string{m[1], m[2], m[3]}
	default:
		for i, st := range refStats {
			s.names[i] = escapeMetricName("ratelimit.service.rate_limit." + path + "." + st)
		}
	}
	return s
}

// escapeMetricName is the exporter's name for an unmapped stat: every
// character outside [a-zA-Z0-9_] becomes "_", and a leading digit gets one
// before it.
func escapeMetricName(name string) string {
	var b strings.Builder
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		b.WriteByte('_')
	}
	for _, c := range name {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// observe counts a decided plan's limits.
func (m *ReferenceMetrics) observe(p *plan) {
	for i := range p.checks {
		meta := &p.meta[i]
		if meta.path == "" {
			continue
		}
		s := m.series.get(meta.path, func() *refSeries { return newRefSeries(meta.path) })
		c, d := &p.checks[i], &p.decisions[i]
		if c.Hits <= 0 || c.Refund {
			continue
		}
		hits := uint64(c.Hits)
		s.counts[refTotal].Add(hits)
		limit := uint64(max(c.Policy.Limit, 0))
		// Remaining is what is left after the hits when they were
		// counted (admitted, or a charge: but a limit of 0 counts
		// nothing), else before them; the reference compares the count
		// after them with the limit.
		used := max(c.Policy.Limit-d.Remaining, 0)
		before, after := uint64(used), uint64(used)+hits
		if d.Allowed || (c.Charge && c.Policy.Limit > 0) {
			before, after = uint64(max(used-c.Hits, 0)), uint64(used)
		}
		near := uint64(math.Floor(float64(limit) * m.nearRatio))
		switch {
		case after > limit:
			if before >= limit {
				s.counts[refOver].Add(hits)
			} else {
				s.counts[refOver].Add(after - limit)
				s.counts[refNear].Add(limit - max(near, before))
			}
			if meta.shadow {
				s.counts[refShadow].Add(hits)
			}
		case after > near:
			s.counts[refNear].Add(after - max(near, before))
		}
		if after <= limit {
			s.counts[refWithin].Add(hits)
		}
	}
}

var refDescs = func() (d [len(refStats)]*prometheus.Desc) {
	for i, st := range refStats {
		d[i] = prometheus.NewDesc(refMappedPrefix+st,
			"envoyproxy/ratelimit's "+st+" per limit, named and labelled as its Prometheus exporter does.",
			[]string{"domain", "key1", "key2"}, nil)
	}
	return d
}()

// Describe sends nothing: the unmapped stats' names depend on the rules,
// so the collector is unchecked.
func (m *ReferenceMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends every rule's counters seen so far, and the per-call ones.
func (m *ReferenceMetrics) Collect(ch chan<- prometheus.Metric) {
	m.svc.collect(ch)
	all := m.series.m.Load()
	if all == nil {
		return
	}
	for _, s := range *all {
		for i := range refStats {
			v := float64(s.counts[i].Load())
			if s.labels != nil {
				ch <- prometheus.MustNewConstMetric(refDescs[i], prometheus.CounterValue, v, s.labels...)
				continue
			}
			desc := prometheus.NewDesc(s.names[i], "envoyproxy/ratelimit's "+refStats[i]+" of a key its exporter maps to no labels.", nil, nil)
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v)
		}
	}
}
