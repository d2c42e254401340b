package rls

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReferenceOptions configure ReferenceMetrics.
type ReferenceOptions struct {
	// Registerer, when set, exports the counters on Prometheus under the
	// names envoyproxy/ratelimit's exporter gives them (USE_PROMETHEUS);
	// nil keeps them for Stats only (statsd).
	Registerer prometheus.Registerer
	// NearLimitRatio is the reference's NEAR_LIMIT_RATIO; a value outside
	// (0, 1] means 0.8, its default.
	NearLimitRatio float64
	// OnResponse, when set, is given each ShouldRateLimit call's duration
	// as it ends: a statsd timer sends every sample, as the reference's
	// does. It must be cheap and safe for concurrent use.
	OnResponse func(time.Duration)
}

// NewReferenceMetricsWith returns the reference's counters as o says.
func NewReferenceMetricsWith(o ReferenceOptions) *ReferenceMetrics {
	ratio := o.NearLimitRatio
	if !(ratio > 0 && ratio <= 1) {
		ratio = 0.8
	}
	m := &ReferenceMetrics{nearRatio: ratio}
	m.svc.onResponse = o.OnResponse
	m.svc.responseTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "ratelimit_service_response_time_seconds",
		Help:        "envoyproxy/ratelimit's ShouldRateLimit response time, named as its exporter does.",
		ConstLabels: prometheus.Labels{"grpc_method": refMethod},
		Buckets:     prometheus.DefBuckets, // statsd_exporter's default
	})
	if o.Registerer != nil {
		o.Registerer.MustRegister(m)
	}
	return m
}

// refMethod is the gRPC method the reference's server stats name.
const refMethod = "ShouldRateLimit"

// The reference's error classes (its call.should_rate_limit scope): a
// backend failure is redis_error, any other failed call service_error.
const (
	refRedisError   = "redis_error"
	refServiceError = "service_error"
)

// refService counts what the reference counts per call and per rule load,
// besides the per-limit stats.
type refService struct {
	totalRequests atomic.Uint64
	redisErrors   atomic.Uint64
	serviceErrors atomic.Uint64
	loadSuccess   atomic.Uint64
	loadError     atomic.Uint64
	responseTime  prometheus.Histogram
	onResponse    func(time.Duration)
}

var (
	refTotalDesc = prometheus.NewDesc("ratelimit_service_total_requests",
		"envoyproxy/ratelimit's ShouldRateLimit calls, named as its exporter does.", nil, prometheus.Labels{"grpc_method": refMethod})
	refErrorDesc = prometheus.NewDesc("ratelimit_service_should_rate_limit_error",
		"envoyproxy/ratelimit's failed ShouldRateLimit calls by err_type (redis_error: the backend failed; service_error: any other failure).", []string{"err_type"}, nil)
	refLoadOKDesc = prometheus.NewDesc("ratelimit_service_config_load_success",
		"envoyproxy/ratelimit's successful rule loads (files or xDS pushes).", nil, nil)
	refLoadErrDesc = prometheus.NewDesc("ratelimit_service_config_load_error",
		"envoyproxy/ratelimit's failed rule loads; the last good rules stay.", nil, nil)
)

// observeCall counts one ShouldRateLimit call that took d.
func (s *refService) observeCall(err error, d time.Duration) {
	s.totalRequests.Add(1)
	if err != nil {
		// The service answers Unavailable when the backend failed, or
		// before any rules (the reference's service_error).
		if st := status.Convert(err); st.Code() == codes.Unavailable && st.Message() != noRulesMsg {
			s.redisErrors.Add(1)
		} else {
			s.serviceErrors.Add(1)
		}
	}
	s.responseTime.Observe(d.Seconds())
	if s.onResponse != nil {
		s.onResponse(d)
	}
}

func (s *refService) collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(refTotalDesc, s.totalRequests.Load())
	counter(refErrorDesc, s.redisErrors.Load(), refRedisError)
	counter(refErrorDesc, s.serviceErrors.Load(), refServiceError)
	counter(refLoadOKDesc, s.loadSuccess.Load())
	counter(refLoadErrDesc, s.loadError.Load())
	ch <- s.responseTime
}

// ConfigLoaded counts one rule load or reload (a file reload or an xDS
// push), failed when err is not nil. It is safe for concurrent use.
func (m *ReferenceMetrics) ConfigLoaded(err error) {
	if err != nil {
		m.svc.loadError.Add(1)
		return
	}
	m.svc.loadSuccess.Add(1)
}

// Stat scopes: the reference's service stats sit below "ratelimit", its
// gRPC server's below "ratelimit_server".
const (
	StatScopeService = "ratelimit"
	StatScopeServer  = "ratelimit_server"
)

// Stats calls f with every counter under the reference's statsd name, in
// scope: its cumulative value so far. A statsd sender sends the growth
// since its last flush. It is safe for concurrent use with requests.
func (m *ReferenceMetrics) Stats(f func(scope, name string, value uint64)) {
	f(StatScopeServer, refMethod+".total_requests", m.svc.totalRequests.Load())
	f(StatScopeService, "service.call.should_rate_limit."+refRedisError, m.svc.redisErrors.Load())
	f(StatScopeService, "service.call.should_rate_limit."+refServiceError, m.svc.serviceErrors.Load())
	f(StatScopeService, "service.config_load_success", m.svc.loadSuccess.Load())
	f(StatScopeService, "service.config_load_error", m.svc.loadError.Load())
	all := m.series.m.Load()
	if all == nil {
		return
	}
	for _, s := range *all {
		for i := range refStats {
			f(StatScopeService, s.statsd[i], s.counts[i].Load())
		}
	}
}

// ResponseTimeStat is the reference's statsd timer of ShouldRateLimit,
// below StatScopeServer.
const ResponseTimeStat = refMethod + ".response_time"

// sanitizeStatName replaces the characters that end a statsd name or
// value (':' and '|') with '_', as the reference does with its keys.
func sanitizeStatName(s string) string {
	if !strings.ContainsAny(s, ":|") {
		return s
	}
	return strings.NewReplacer(":", "_", "|", "_").Replace(s)
}
