package rls

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
)

// Label values for requests whose domain is not in the rules: a client must
// not be able to create metric series by inventing domains.
const (
	unknownDomainLabel = "_unknown"
)

// Metrics holds the service's Prometheus collectors. Every label value comes
// from configuration (domain, rule ID, algorithm) or a fixed set (code,
// shadow), never from descriptor values, so the series count is bounded by
// the rules, not by traffic.
type Metrics struct {
	requests  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// NewMetrics registers the service's collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_requests_total",
			Help: "ShouldRateLimit calls by domain and result (ok, over_limit, or the gRPC error code).",
		}, []string{"domain", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_limit_decisions_total",
			Help: "Decisions per applied limit by domain, rule, algorithm, code and whether the rule is in shadow or quota mode.",
		}, []string{"domain", "rule", "algorithm", "code", "shadow"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "envoy_rls_request_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, including the backend.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"domain"}),
	}
	reg.MustRegister(m.requests, m.decisions, m.duration)
	return m
}

func (m *Metrics) observeRequest(domain string, resp *pb.RateLimitResponse, err error, d time.Duration) {
	code := "ok"
	switch {
	case err != nil:
		code = status.Code(err).String()
	case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	}
	m.requests.WithLabelValues(domain, code).Inc()
	m.duration.WithLabelValues(domain).Observe(d.Seconds())
}

func (m *Metrics) observeChecks(domain string, p *plan, globalShadow bool) {
	for i := range p.checks {
		meta := &p.meta[i]
		code := "ok"
		if !p.decisions[i].Allowed {
			code = "over_limit"
		}
		shadow := "false"
		if meta.soft || globalShadow {
			shadow = "true"
		}
		m.decisions.WithLabelValues(domain, meta.ruleID, p.checks[i].Policy.Algorithm.String(), code, shadow).Inc()
	}
}
