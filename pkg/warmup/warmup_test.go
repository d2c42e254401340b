package warmup

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// t0 is the test clock's start: a round minute, so that no fixed window
// boundary falls inside a step.
var t0 = time.Date(2026, 12, 24, 10, 0, 0, 0, time.UTC)

func TestFraction(t *testing.T) {
	w := &rules.Warmup{Period: 4 * time.Second, From: 0.25}
	tests := []struct {
		elapsed time.Duration
		want    float64
	}{
		{-time.Hour, 0.25},
		{0, 0.25},
		{time.Second, 0.4375},
		{2 * time.Second, 0.625},
		{4*time.Second - time.Microsecond, 0.25 + 0.75*float64(4*time.Second-time.Microsecond)/float64(4*time.Second)},
		{4 * time.Second, 1},
		{time.Hour, 1},
	}
	for _, tt := range tests {
		if got := Fraction(w, tt.elapsed); got != tt.want {
			t.Errorf("Fraction(%s) = %v, want %v", tt.elapsed, got, tt.want)
		}
	}
}

func TestScale(t *testing.T) {
	tests := []struct {
		name               string
		limit, burst       int64
		f                  float64
		wantLimit, wantBur int64
	}{
		{"floor", 8, 12, 0.4375, 3, 5},
		{"never below 1", 3, 3, 0.1, 1, 1},
		{"zero stays zero", 0, 0, 0.5, 0, 0},
		{"no burst stays none", 10, 0, 0.5, 5, 0},
		{"full", 8, 12, 1, 8, 12},
		{"large", 4294967295, 4294967295, 0.5, 2147483647, 2147483647},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Scale(algo.Policy{Algorithm: algo.TokenBucket, Limit: tt.limit, Burst: tt.burst, Period: algo.Second}, tt.f)
			if p.Limit != tt.wantLimit || p.Burst != tt.wantBur || p.Algorithm != algo.TokenBucket || p.Period != algo.Second {
				t.Errorf("Scale = %+v, want limit %d burst %d, algorithm and period kept", p, tt.wantLimit, tt.wantBur)
			}
		})
	}
}

// step is a moment of a ramp and the limit then.
type step struct {
	at   time.Duration // after t0
	want uint32
}

// TestRampEveryAlgorithm: through the service, on the in-process store and
// on Redis, every algorithm admits exactly the ramp's limit at each step
// (a fresh counter each step, taken at one instant) and reports it as
// current_limit; a fixed start holds the ramp's start until then, and
// without one the first request anchors the ramp.
func TestRampEveryAlgorithm(t *testing.T) {
	// limit 8 from 0.25 over 4s: 2, then 8 × (0.25 + 0.75 × s/4) floored.
	firstSight := []step{{0, 2}, {time.Second, 3}, {2 * time.Second, 5}, {3 * time.Second, 6}, {4 * time.Second, 8}, {time.Minute - time.Second, 8}}
	fixed := []step{{0, 2}, {10 * time.Second, 2}, {12 * time.Second, 5}, {14 * time.Second, 8}}
	ramps := []struct {
		name   string
		warmup string
		steps  []step
	}{
		{"first sight", `{period: 4s, from: 0.25}`, firstSight},
		{"fixed start", fmt.Sprintf(`{period: 4s, from: 0.25, start: %q}`, t0.Add(10*time.Second).Format(time.RFC3339)), fixed},
	}
	backends := []struct {
		name string
		new  func(t *testing.T) *stack.Stack
	}{
		{"memory", func(t *testing.T) *stack.Stack { return newStack(t, stack.Config{}) }},
		{"redis", func(t *testing.T) *stack.Stack {
			return newStack(t, stack.Config{
				Redis:      &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)},
				Timeout:    10 * time.Second,
				CallerTime: true,
				KeyPrefix:  redistest.KeyPrefix(t),
			})
		}},
	}
	for _, b := range backends {
		for _, a := range algo.Algorithms {
			for _, r := range ramps {
				t.Run(b.name+"/"+a.String()+"/"+r.name, func(t *testing.T) {
					y := fmt.Sprintf("domain: w\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 8, algorithm: %s, warmup: %s}}\n", a, r.warmup)
					// The service's clock reads t0 plus the current step's offset.
					var offset atomic.Int64
					now := func() time.Time { return t0.Add(time.Duration(offset.Load())) }
					svc := newService(t, y, b.new(t), now, New(Options{}))
					for i, st := range r.steps {
						offset.Store(int64(st.at))
						if got := admitted(t, svc, fmt.Sprintf("v%d", i), 10); got != st.want {
							t.Errorf("at %s: admitted %d at one instant, want %d", st.at, got, st.want)
						}
					}
				})
			}
		}
	}
}

func newStack(t *testing.T, cfg stack.Config) *stack.Stack {
	t.Helper()
	s, err := stack.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("stack.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newService serves the rule file y on backend at now with adj.
func newService(t *testing.T, y string, backend rls.Backend, now func() time.Time, adj ...rls.LimitAdjuster) *rls.Service {
	t.Helper()
	snap := rulestest.Snapshot(t, "w.yaml", y, rules.Options{})
	svc, err := rls.New(rls.Config{Rules: func() *rules.Snapshot { return snap }, Backend: backend, Now: now, Adjust: adj})
	if err != nil {
		t.Fatalf("rls.New: %v", err)
	}
	return svc
}

// admitted sends up to n requests for k=value and returns how many were
// admitted before the first denial; every admitted one must report the
// same current_limit, which is returned as the count's check.
func admitted(t *testing.T, svc *rls.Service, value string, n int) uint32 {
	t.Helper()
	req := &pb.RateLimitRequest{Domain: "w", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}},
	}}}
	var ok uint32
	for range n {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		st := resp.Statuses[0]
		if st.Code != pb.RateLimitResponse_OK {
			break
		}
		ok++
		if got := st.GetCurrentLimit().GetRequestsPerUnit(); got != ok+st.LimitRemaining {
			t.Errorf("request %d: current_limit %d, remaining %d: they disagree", ok, got, st.LimitRemaining)
		}
	}
	return ok
}

// TestRampRestartsOnChange: without a start, a reload that keeps a limit
// as it was keeps its ramp; one that changes the limit starts it again.
func TestRampRestartsOnChange(t *testing.T) {
	limitOf := func(rpu int) *rules.Limit {
		t.Helper()
		y := fmt.Sprintf("domain: w\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: %d, algorithm: fixed_window, warmup: {period: 4s, from: 0.25}}}\n", rpu)
		d, err := rules.Parse("w.yaml", []byte(y), rules.Options{})
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		return &d.Rules()[0].Limits[0]
	}
	adj := New(Options{})
	at := func(d time.Duration, l *rules.Limit) int64 {
		return adj.AdjustLimit(t0.Add(d), "w", nil, l, l.Policy).Limit
	}
	first := limitOf(8)
	steps := []struct {
		name string
		at   time.Duration
		l    *rules.Limit
		want int64
	}{
		{"first sight", 0, first, 2},
		{"same limit reloaded", 2 * time.Second, limitOf(8), 5},
		{"limit changed", 2 * time.Second, limitOf(12), 3},
		{"changed limit ramps from its own start", 4 * time.Second, limitOf(12), 7},
		{"the old definition keeps its ramp", 4 * time.Second, first, 8},
	}
	for _, s := range steps {
		if got := at(s.at, s.l); got != s.want {
			t.Errorf("%s: limit %d at %s, want %d", s.name, got, s.at, s.want)
		}
	}
}

// TestNamedInEffectiveLimit: explain and /debug/config name the warm-up as
// the source of a ramping limit.
func TestNamedInEffectiveLimit(t *testing.T) {
	y := "domain: w\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 8, warmup: {period: 4s, from: 0.25, start: \"2026-12-24T10:00:00Z\"}}}\n"
	d, err := rules.Parse("w.yaml", []byte(y), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := d.Rules()[0]
	e := rls.EffectiveLimit([]rls.LimitAdjuster{New(Options{})}, t0, "w", r, &r.Limits[0])
	if len(e.Sources) != 1 || e.Sources[0].Name != "warm-up" || e.RequestsPerUnit != 2 {
		t.Fatalf("effective %+v, want 2 from the warm-up", e)
	}
}
