package rls

import "github.com/prometheus/client_golang/prometheus"

// NewReferenceMetrics registers the reference's per-limit counters with
// reg. nearLimitRatio is the reference's NEAR_LIMIT_RATIO (0.8 there by
// default); a value outside (0, 1] means 0.8.
func NewReferenceMetrics(reg prometheus.Registerer, nearLimitRatio float64) *ReferenceMetrics {
	return NewReferenceMetricsWith(ReferenceOptions{Registerer: reg, NearLimitRatio: nearLimitRatio})
}
