package rls

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestReferenceServiceMetrics: the reference's per-call families
// (total_requests, response_time, should_rate_limit errors by class) and
// its config loads, on Prometheus under its exporter's names.
func TestReferenceServiceMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var timed []time.Duration
	ref := NewReferenceMetricsWith(ReferenceOptions{Registerer: reg, OnResponse: func(d time.Duration) {
		mu.Lock()
		timed = append(timed, d)
		mu.Unlock()
	}})
	ok, _ := newTestService(t, twoRules, func(c *Config) { c.ReferenceMetrics = ref })
	failing, _ := newTestService(t, twoRules, func(c *Config) { c.ReferenceMetrics = ref; c.Backend = failingBackend{} })

	call(t, ok, request("d", desc("a=x")))
	call(t, ok, request("d", desc("a=x")))
	if _, err := failing.ShouldRateLimit(context.Background(), request("d", desc("a=x"))); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing backend: %v, want Unavailable", err)
	}
	bad := request("d", desc("a=x"))
	bad.Domain = ""
	if _, err := ok.ShouldRateLimit(context.Background(), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty domain: %v, want InvalidArgument", err)
	}
	ref.ConfigLoaded(nil)
	ref.ConfigLoaded(nil)
	ref.ConfigLoaded(errors.New("bad file"))

	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"ratelimit_service_total_requests", "grpc_method=ShouldRateLimit", 4},
		{"ratelimit_service_should_rate_limit_error", "err_type=redis_error", 1},
		{"ratelimit_service_should_rate_limit_error", "err_type=service_error", 1},
		{"ratelimit_service_config_load_success", "", 2},
		{"ratelimit_service_config_load_error", "", 1},
	} {
		if got := counterValues(t, reg, c.name)[c.labels]; got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := histogramCount(t, reg, "ratelimit_service_response_time_seconds"); n != 4 {
		t.Errorf("response_time samples %d, want 4", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(timed) != 4 {
		t.Errorf("OnResponse called %d times, want 4", len(timed))
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestReferenceStats: Stats yields every counter under the reference's
// statsd name and scope, the per-limit ones with ':' and '|' replaced.
func TestReferenceStats(t *testing.T) {
	ref := NewReferenceMetricsWith(ReferenceOptions{}) // statsd only: nothing registered
	s, _ := newTestService(t, `
domain: sd
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value: "a:b"
    descriptors:
      - key: rule
        rate_limit: {unit: minute, requests_per_unit: 5}
`, func(c *Config) { c.ReferenceMetrics = ref })
	call(t, s, request("sd", desc("user=u")))
	call(t, s, request("sd", desc("user=u")))
	call(t, s, request("sd", desc("route=a:b", "rule=x")))
	ref.ConfigLoaded(nil)
	got := map[string]uint64{}
	ref.Stats(func(scope, name string, v uint64) { got[scope+"|"+name] = v })
	for name, want := range map[string]uint64{
		"ratelimit_server|ShouldRateLimit.total_requests":             3,
		"ratelimit|service.config_load_success":                       1,
		"ratelimit|service.config_load_error":                         0,
		"ratelimit|service.call.should_rate_limit.redis_error":        0,
		"ratelimit|service.call.should_rate_limit.service_error":      0,
		"ratelimit|service.rate_limit.sd.user.total_hits":             2,
		"ratelimit|service.rate_limit.sd.user.within_limit":           1,
		"ratelimit|service.rate_limit.sd.user.over_limit":             1,
		"ratelimit|service.rate_limit.sd.user.near_limit":             1, // floor(0.8 × 1) = 0: the first hit is near
		"ratelimit|service.rate_limit.sd.user.shadow_mode":            0,
		"ratelimit|service.rate_limit.sd.route_a_b.rule.total_hits":   1,
		"ratelimit|service.rate_limit.sd.route_a_b.rule.within_limit": 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v; all: %v", name, v, ok, want, got)
		}
	}
}

// fakeTracer records what the service tells it.
type fakeTracer struct {
	mu       sync.Mutex
	started  []string
	finished []string
}

type ctxKey struct{}

func (f *fakeTracer) Start(ctx context.Context, domain string, n int) (context.Context, RequestSpan) {
	f.mu.Lock()
	f.started = append(f.started, domain+"/"+string(rune('0'+n)))
	f.mu.Unlock()
	return context.WithValue(ctx, ctxKey{}, "traced"), fakeSpan{f}
}

type fakeSpan struct{ f *fakeTracer }

func (s fakeSpan) Finish(code string, err error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if err != nil {
		code += ":" + status.Code(err).String()
	}
	s.f.finished = append(s.f.finished, code)
}

// ctxBackend fails unless the context is the tracer's, so the backend
// call runs inside the request's span.
type ctxBackend struct{ Backend }

func (b ctxBackend) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if ctx.Value(ctxKey{}) != "traced" {
		return nil, errors.New("backend called outside the request's span")
	}
	return b.Backend.Apply(ctx, now, checks)
}

// TestTracerHook: one span per call with domain, descriptor count and
// code; the backend runs in the span's context.
func TestTracerHook(t *testing.T) {
	tr := &fakeTracer{}
	s, _ := newTestService(t, twoRules, func(c *Config) {
		c.Tracer = tr
		c.Backend = ctxBackend{c.Backend}
	})
	call(t, s, request("d", desc("a=x"), desc("a=x")))
	bad := request("d", desc("a=x"))
	bad.Domain = ""
	_, _ = s.ShouldRateLimit(context.Background(), bad)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if want := []string{"d/2", "/1"}; !slices.Equal(tr.started, want) {
		t.Errorf("started %v, want %v", tr.started, want)
	}
	if want := []string{"OK", "UNKNOWN:InvalidArgument"}; !slices.Equal(tr.finished, want) {
		t.Errorf("finished %v, want %v", tr.finished, want)
	}
}

// TestReferenceMetricsAllocs: counting a call for the reference's stats
// (Prometheus and the statsd hook) adds no allocation to ShouldRateLimit
// once a rule's series exist, and neither does an unset Tracer.
func TestReferenceMetricsAllocs(t *testing.T) {
	req := request("d", desc("a=x"))
	allocs := func(mutate func(*Config)) float64 {
		s, _ := newTestService(t, twoRules, mutate)
		call(t, s, req)
		return testing.AllocsPerRun(200, func() { _, _ = s.ShouldRateLimit(context.Background(), req) })
	}
	base := allocs(nil)
	withRef := allocs(func(c *Config) {
		c.ReferenceMetrics = NewReferenceMetricsWith(ReferenceOptions{Registerer: prometheus.NewRegistry(), OnResponse: func(time.Duration) {}})
	})
	if withRef != base && !raceEnabled {
		t.Errorf("ShouldRateLimit allocates %v times with the reference's stats, %v without", withRef, base)
	}
}
