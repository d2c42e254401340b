package rls

import (
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// UnknownDomainLabel is the domain label of requests whose domain is not
// in the rules, in every metric of envoy-rls (the rate-limit service's
// and RLQS's alike): a client must not be able to create metric series by
// inventing domains.
const UnknownDomainLabel = "_unknown"

// Metrics holds the service's Prometheus collectors. Every label value comes
// from configuration (domain, rule ID, algorithm) or a fixed set (code,
// shadow), never from descriptor values, so the series count is bounded by
// the rules, not by traffic.
type Metrics struct {
	requests  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	ignored   *prometheus.CounterVec
	charged   *prometheus.CounterVec
	overdraft *prometheus.CounterVec

	// The children of the vectors above, by label values: WithLabelValues
	// hashes and validates every label on each call, several times per
	// request, where these cost one map lookup.
	requestSeries  series[requestLabels, prometheus.Counter]
	decisionSeries series[decisionLabels, prometheus.Counter]
	durationSeries series[string, prometheus.Observer]
	chargeSeries   series[limitLabels, chargeCounters]
}

// limitLabels name one limit of one rule.
type limitLabels struct{ domain, rule, limit string }

// chargeCounters are one limit's children of charged and overdraft.
type chargeCounters struct{ charged, overdraft prometheus.Counter }

type requestLabels struct{ domain, code string }

type decisionLabels struct {
	domain, rule, limit string
	algorithm           algo.Algorithm
	code                decisionCode
	shadow              bool
}

// decisionCode is what happened to one limit's hits: the code label of
// envoy_rls_limit_decisions_total.
type decisionCode uint8

const (
	// codeOK: the limit admitted the hits and consumed them.
	codeOK decisionCode = iota
	// codeOverLimit: the limit denied the hits and consumed none.
	codeOverLimit
	// codeNotApplied: the limit would have admitted the hits, but another
	// limit of the request denied it, so (all or nothing) it consumed none
	// (a charge is counted all the same: then it is codeOK).
	codeNotApplied
)

func (c decisionCode) String() string {
	switch c {
	case codeOverLimit:
		return "over_limit"
	case codeNotApplied:
		return "not_applied"
	}
	return "ok"
}

// series caches the children of a metric vector. Reads take no lock: the
// map is replaced, never changed, when a new label set appears, which
// happens once per series (their number is bounded by the configuration).
type series[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// get returns the child for k, made by child the first time.
func (s *series[K, V]) get(k K, child func() V) V {
	if m := s.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, n := s.m.Load(), 0
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
		n = len(*old)
	}
	m := make(map[K]V, n+1)
	if old != nil {
		for key, val := range *old {
			m[key] = val
		}
	}
	v := child()
	m[k] = v
	s.m.Store(&m)
	return v
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
			Help: "Decisions per matched limit by domain, rule, limit (its name, else its place in the descriptor), algorithm, code (ok: admitted and counted; over_limit: denied; not_applied: admitted but not counted because another limit denied the request) and whether the rule is in shadow or quota mode.",
		}, []string{"domain", "rule", "limit", "algorithm", "code", "shadow"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "envoy_rls_request_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, including the backend.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"domain"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_limit_overrides_ignored_total",
			Help: "Per-request limit overrides ignored by the server's --limit-overrides policy (the configured limits applied instead), by domain.",
		}, []string{"domain"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_charged_hits_total",
			Help: "Hits counted by limits with cost: charge (every hit is counted, past the limit too), by domain, rule and limit.",
		}, []string{"domain", "rule", "limit"}),
		overdraft: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_overdraft_hits_total",
			Help: "Hits that charges counted past their limit (the budget overdrawn by them), by domain, rule and limit.",
		}, []string{"domain", "rule", "limit"}),
	}
	reg.MustRegister(m.requests, m.decisions, m.duration, m.ignored, m.charged, m.overdraft)
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
	m.requestSeries.get(requestLabels{domain, code}, func() prometheus.Counter {
		return m.requests.WithLabelValues(domain, code)
	}).Inc()
	m.durationSeries.get(domain, func() prometheus.Observer {
		return m.duration.WithLabelValues(domain)
	}).Observe(d.Seconds())
}

// observeChecks counts each limit's decision once the request is decided.
// Its code says whether the limit's hits were applied: a limit that
// admitted inside a request another limit denied consumed nothing (the
// request is all or nothing), and counting it as ok would report traffic
// that never reached its counter.
func (m *Metrics) observeChecks(domain string, p *plan, globalShadow bool) {
	soft := func(i int) bool { return globalShadow || p.meta[i].soft }
	denied := p.deniedBy(soft)
	for i := range p.checks {
		code := codeOK
		switch {
		case !p.decisions[i].Allowed:
			code = codeOverLimit
		case denied && !p.checks[i].Charge:
			code = codeNotApplied
		}
		k := decisionLabels{
			domain:    domain,
			rule:      p.meta[i].ruleID,
			limit:     p.meta[i].limitLabel,
			algorithm: p.checks[i].Policy.Algorithm,
			code:      code,
			shadow:    soft(i),
		}
		m.decisionSeries.get(k, func() prometheus.Counter { return m.decisionCounter(k) }).Inc()
		if c := &p.checks[i]; c.Charge && c.Hits > 0 {
			m.observeCharge(limitLabels{domain, k.rule, k.limit}, c.Hits, p.decisions[i])
		}
	}
}

// observeCharge counts a charge's hits, and those it counted past the
// limit: as many as the decision's overdraft (a negative Remaining), at
// most its hits.
func (m *Metrics) observeCharge(k limitLabels, hits int64, d algo.Decision) {
	c := m.chargeSeries.get(k, func() chargeCounters {
		return chargeCounters{m.charged.WithLabelValues(k.domain, k.rule, k.limit), m.overdraft.WithLabelValues(k.domain, k.rule, k.limit)}
	})
	c.charged.Add(float64(hits))
	if d.Remaining < 0 {
		c.overdraft.Add(float64(min(hits, -d.Remaining)))
	}
}

func (m *Metrics) decisionCounter(k decisionLabels) prometheus.Counter {
	shadow := "false"
	if k.shadow {
		shadow = "true"
	}
	return m.decisions.WithLabelValues(k.domain, k.rule, k.limit, k.algorithm.String(), k.code.String(), shadow)
}

// observeIgnoredOverrides counts n overrides the policy ignored. It is
// rare, so it skips the series cache.
func (m *Metrics) observeIgnoredOverrides(domain string, n int) {
	m.ignored.WithLabelValues(domain).Add(float64(n))
}

// DecisionCount is one series of envoy_rls_limit_decisions_total: a
// limit's decisions so far with one code.
type DecisionCount struct {
	Domain, Rule, Limit string
	// Code is "ok", "over_limit" or "not_applied".
	Code   string
	Shadow bool
	Total  uint64
}

// Decisions returns the count of every limit's decisions so far, by code,
// for a reader that samples them (the console's live rates): the counters
// the metric already keeps, read off the request path.
func (m *Metrics) Decisions() []DecisionCount {
	p := m.decisionSeries.m.Load()
	if p == nil {
		return nil
	}
	out := make([]DecisionCount, 0, len(*p))
	var d dto.Metric
	for k, c := range *p {
		if err := c.Write(&d); err != nil {
			continue
		}
		out = append(out, DecisionCount{Domain: k.domain, Rule: k.rule, Limit: k.limit, Code: k.code.String(),
			Shadow: k.shadow, Total: uint64(d.GetCounter().GetValue())})
	}
	return out
}
