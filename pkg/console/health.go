package console

import (
	"context"
	"sync"
	"time"

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
	// CacheFor is how long one reading of the panel (the pings and the
	// metrics) serves every poll: every open tab polls every HealthPoll,
	// and the masters should see one PING per interval, not one per tab.
	// 0 means HealthPoll.
	CacheFor time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// HealthPoll is how often the page polls the health panel
// (static/app.js).
const HealthPoll = 3 * time.Second

// healthTimeout bounds one reading of the panel: the pings run on behalf
// of every waiting poll, so no single poll's context bounds them.
const healthTimeout = 2 * time.Second

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

// NewHealth returns the health panel's reader. A reading is kept for
// o.CacheFor; when it is older, the first poll reads again and the polls
// that come meanwhile wait for that reading instead of starting their own.
func NewHealth(o HealthOptions) func(ctx context.Context) any {
	if o.CacheFor <= 0 {
		o.CacheFor = HealthPoll
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &healthCache{read: readHealth(o), every: o.CacheFor, now: o.Now}
	return func(ctx context.Context) any { return c.get(ctx) }
}

// healthCache holds the last reading of the panel and single-flights the
// next one.
type healthCache struct {
	read  func(ctx context.Context) Health
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last *Health
	at   time.Time
	// flight is closed when the reading in progress is done; nil when none
	// is.
	flight chan struct{}
}

func (c *healthCache) get(ctx context.Context) Health {
	c.mu.Lock()
	if c.last != nil && c.now().Sub(c.at) < c.every {
		h := *c.last
		c.mu.Unlock()
		return h
	}
	if f := c.flight; f != nil {
		c.mu.Unlock()
		select {
		case <-f:
		case <-ctx.Done():
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.last == nil {
			return Health{Shards: []Shard{}, Metrics: map[string]float64{}, Error: "console: health reading still in progress"}
		}
		return *c.last
	}
	f := make(chan struct{})
	c.flight = f
	c.mu.Unlock()
	// The reading serves every poll waiting on it: one poll's end (a tab
	// closed) must not cut it short.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	h := c.read(rctx)
	cancel()
	c.mu.Lock()
	c.last, c.at, c.flight = &h, c.now(), nil
	c.mu.Unlock()
	close(f)
	return h
}

// readHealth reads the panel now.
func readHealth(o HealthOptions) func(ctx context.Context) Health {
	return func(ctx context.Context) Health {
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
