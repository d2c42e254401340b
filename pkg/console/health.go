package console

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Shard is one store node the health panel pinged: a Redis Cluster master,
// the standalone or Sentinel-managed master.
type Shard struct {
	Addr  string  `json:"addr"`
	RTTMS float64 `json:"rtt_ms"`
	Error string  `json:"error,omitempty"`
}

// HealthOptions say where the health panel's facts come from.
type HealthOptions struct {
	// Store is "redis" or "memory"; Topology "standalone", "sentinel",
	// "cluster" or "in-process".
	Store, Topology string
	// Gatherer holds the service's metrics: the breakers, the deny
	// cache, the leases, the held requests and the Redis round trips are
	// read from them, as /metrics shows them.
	Gatherer prometheus.Gatherer
	// Ping measures each node's round trip now; nil for the in-process
	// store.
	Ping func(ctx context.Context) []Shard
}

// Health is the backend health panel.
type Health struct {
	Store    string  `json:"store"`
	Topology string  `json:"topology"`
	Shards   []Shard `json:"shards"`
	// Breaker is the most severe breaker state of any shard; Breakers
	// counts the shards in each state.
	Breaker  string             `json:"breaker,omitempty"`
	Breakers map[string]float64 `json:"breakers,omitempty"`
	// Metrics are the gauges and counters the panel shows, by metric
	// name, for those the server has (a deny cache, leases, the
	// in-process store's keys).
	Metrics map[string]float64 `json:"metrics"`
	// RoundTripMeanMS is the mean Redis pipeline round trip since start.
	RoundTripMeanMS *float64 `json:"roundtrip_mean_ms,omitempty"`
	Error           string   `json:"error,omitempty"`
}

// healthMetrics are the single-value metrics the panel shows.
var healthMetrics = map[string]bool{
	"envoy_rls_deny_cache_entries":          true,
	"envoy_rls_requests_held":               true,
	"envoy_rls_memstore_keys":               true,
	"envoy_rls_lease_granted_total":         true,
	"envoy_rls_lease_local_decisions_total": true,
	"envoy_rls_lease_hits_returned_total":   true,
	"envoy_rls_lease_hits_expired_total":    true,
	"envoy_rls_backend_failure_mode_total":  true,
}

// NewHealth returns the health panel's reader.
func NewHealth(o HealthOptions) func(ctx context.Context) any {
	return func(ctx context.Context) any {
		h := Health{Store: o.Store, Topology: o.Topology, Shards: []Shard{}, Metrics: map[string]float64{}}
		if o.Ping != nil {
			h.Shards = o.Ping(ctx)
		}
		if o.Gatherer == nil {
			return h
		}
		mfs, err := o.Gatherer.Gather()
		if err != nil {
			h.Error = err.Error()
		}
		for _, mf := range mfs {
			name := mf.GetName()
			switch {
			case name == "envoy_rls_backend_breaker_state":
				for _, m := range mf.GetMetric() {
					if m.GetGauge().GetValue() == 1 {
						h.Breaker = label(m, "state")
					}
				}
			case name == "envoy_rls_backend_breaker_shards":
				h.Breakers = map[string]float64{}
				for _, m := range mf.GetMetric() {
					h.Breakers[label(m, "state")] = m.GetGauge().GetValue()
				}
			case name == "envoy_rls_redis_roundtrip_seconds":
				var sum float64
				var n uint64
				for _, m := range mf.GetMetric() {
					sum += m.GetHistogram().GetSampleSum()
					n += m.GetHistogram().GetSampleCount()
				}
				if n > 0 {
					mean := sum / float64(n) * 1000
					h.RoundTripMeanMS = &mean
				}
			case healthMetrics[name]:
				var v float64
				for _, m := range mf.GetMetric() {
					v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
				h.Metrics[name] = v
			}
		}
		return h
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
