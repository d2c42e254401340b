package rlqs

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the RLQS server's Prometheus metrics. Labels come from
// configuration (domain, rule ID), never from request values.
type Metrics struct {
	assignments *prometheus.CounterVec
	instances   *prometheus.GaugeVec
	reported    *prometheus.CounterVec
	streams     prometheus.Gauge
	storeErrors prometheus.Counter
	buckets     prometheus.Gauge
	forgotten   *prometheus.CounterVec
	refresh     prometheus.Histogram
}

// NewMetrics registers the metrics with reg (nil registers nothing).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_rlqs_assignments_sent_total",
			Help: "RLQS bucket actions sent, by domain, rule (\"\" for no rule) and kind (token_bucket, allow_all, deny_all, abandon).",
		}, []string{"domain", "rule", "kind"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "envoy_rls_rlqs_instances",
			Help: "Envoy instances with live usage on the rule's buckets, as of the last report on the rule (across replicas when on Redis).",
		}, []string{"domain", "rule"}),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_rlqs_reported_requests_total",
			Help: "Requests Envoys reported in RLQS usage reports, by domain, rule and outcome (allowed, denied).",
		}, []string{"domain", "rule", "outcome"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_rlqs_streams",
			Help: "RLQS streams open on this replica (one per Envoy instance).",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_rlqs_usage_errors_total",
			Help: "RLQS usage reports whose demand could not be recorded or read (Redis down): the last assignments stand until their TTL, then the failure mode applies.",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_rlqs_buckets",
			Help: "RLQS buckets live on this replica, summed over its streams (a bucket reported by two Envoys counts twice): what refresh works on and what the replica's RLQS memory grows with.",
		}),
		forgotten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_rlqs_buckets_forgotten_total",
			Help: "RLQS buckets forgotten, by reason: idle (no requests past the assignment TTL or the token bucket's refill; Envoy was told to abandon it) or unreported (Envoy stopped naming it for a TTL).",
		}, []string{"reason"}),
		refresh: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "envoy_rls_rlqs_refresh_seconds",
			Help:    "Duration of one RLQS refresh round (every live bucket of every stream on this replica recomputed from the shared demand).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.assignments, m.instances, m.reported, m.streams, m.storeErrors, m.buckets, m.forgotten, m.refresh)
	}
	return m
}
