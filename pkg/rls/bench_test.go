package rls

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// benchRules has a nested two-entry rule (user → path), a per-tenant rule
// with two limits, and a rule whose limit the "denied" case exhausts.
const benchRules = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10000000, algorithm: token_bucket}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 10000000, algorithm: token_bucket}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 10000000, algorithm: token_bucket}
      - {unit: day, requests_per_unit: 10000000, algorithm: sliding_window, name: daily}
  - key: over
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: fixed_window}
`

// BenchmarkShouldRateLimit measures one call on the in-process store (real
// clock), with and without metrics, for the request shapes the bench
// scenarios send. The store's own cost is in memstore's BenchmarkApply.
func BenchmarkShouldRateLimit(b *testing.B) {
	cases := []struct {
		name    string
		req     *pb.RateLimitRequest
		metrics bool
		headers HeaderOptions
	}{
		{name: "1desc-2entries", req: request("bench", desc("user=alice", "path=/v1/orders"))},
		{name: "1desc-2entries/metrics", req: request("bench", desc("user=alice", "path=/v1/orders")), metrics: true},
		{name: "3desc/metrics", req: request("bench", desc("user=alice"), desc("tenant=acme"), desc("user=alice", "path=/v1/orders")), metrics: true},
		{name: "denied/metrics", req: request("bench", desc("over=x")), metrics: true},
		{name: "1desc-2entries/metrics+headers", req: request("bench", desc("user=alice", "path=/v1/orders")), metrics: true,
			headers: HeaderOptions{Draft: true, Legacy: true, RetryAfter: true}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			// Config.Now unset: the real clock, as in production.
			cfg := Config{Backend: newStore(b), Headers: bc.headers}
			if bc.metrics {
				cfg.Metrics = NewMetrics(prometheus.NewRegistry())
			}
			s := newService(b, mustSnapshot(b, benchRules), cfg)
			ctx := context.Background()
			// Prime, so that "denied" measures denials and every case
			// measures the steady state.
			for range 2 {
				if _, err := s.ShouldRateLimit(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(ctx, bc.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMatchAndKey measures building the plan of a one-descriptor,
// two-entry request: validation, rule matching, the key entries, and both
// keys of each limit (memstore's algo.Check.AppendIdentity, the Redis key
// of redisalgo.AppendKey); it must not allocate.
func BenchmarkMatchAndKey(b *testing.B) {
	snap := mustSnapshot(b, benchRules)
	req := request("bench", desc("user=alice", "path=/v1/orders"))
	p := new(plan)
	var key []byte
	run := func() {
		if err := DefaultRequestLimits.validate(req); err != nil {
			b.Fatal(err)
		}
		if err := p.build(req, snap, snap.HasDomain(req.GetDomain()), overrideRules{}, nil); err != nil {
			b.Fatal(err)
		}
		for i := range p.checks {
			key = p.checks[i].AppendIdentity(key[:0])
			key = redisalgo.AppendKey(key[:0], p.checks[i], redisalgo.DefaultCounterHashes)
		}
		p.reset()
	}
	run()
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
	if n := testing.AllocsPerRun(100, run); n != 0 {
		b.Fatalf("match and key encoding allocate %v times per request, want 0", n)
	}
}

// BenchmarkObserveChecks measures the per-limit metric updates of a
// three-descriptor request.
func BenchmarkObserveChecks(b *testing.B) {
	snap := mustSnapshot(b, benchRules)
	req := request("bench", desc("user=alice"), desc("tenant=acme"), desc("user=u"+strconv.Itoa(1), "path=/"))
	p := new(plan)
	if err := p.build(req, snap, snap.HasDomain(req.GetDomain()), overrideRules{}, nil); err != nil {
		b.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.observeChecks("bench", p, false)
	}
}

// BenchmarkTopCost measures what the console's top-clients sketch
// (Config.Top, pkg/topk) adds to an in-process decision: the same
// requests (three descriptors, four limits) go to a service without it and
// one with it, in alternating blocks so that both see the same machine
// load. Users cycle over 16 (every value stays in the sketch: a few hot
// clients) or 1000 (more than its 32 slots: nearly every update replaces a
// value, the worst case). It
// reports the median block's ns per call without the sketch (plain-ns)
// and with it (top-ns), and their difference as a percentage of the
// decision (top-%): medians, so that a burst of load from elsewhere on a
// shared machine moves them little. docs/console.md states the budget.
func BenchmarkTopCost(b *testing.B) {
	for _, users := range []int{16, 1000} {
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) { benchTopCost(b, users) })
	}
}

func benchTopCost(b *testing.B, users int) {
	reqs := make([]*pb.RateLimitRequest, users)
	for i := range reqs {
		u := "user=u" + strconv.Itoa(i)
		reqs[i] = request("bench", desc(u), desc("tenant=acme"), desc(u, "path=/v1/orders"))
	}
	sketch, err := topk.New(topk.Options{})
	if err != nil {
		b.Fatal(err)
	}
	snap := mustSnapshot(b, benchRules)
	plain := newService(b, snap, Config{Backend: newStore(b), Metrics: NewMetrics(prometheus.NewRegistry())})
	withTop := newService(b, snap, Config{Backend: newStore(b), Metrics: NewMetrics(prometheus.NewRegistry()), Top: sketch})
	ctx := context.Background()
	const block = 64
	run := func(s *Service, from int) time.Duration {
		start := time.Now()
		for i := range block {
			if _, err := s.ShouldRateLimit(ctx, reqs[(from+i)%len(reqs)]); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	run(plain, 0)
	run(withTop, 0)
	var tPlain, tTop []time.Duration
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		tPlain = append(tPlain, run(plain, n))
		tTop = append(tTop, run(withTop, n))
		n += block
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / block
	}
	p, t := median(tPlain), median(tTop)
	b.ReportMetric(p, "plain-ns")
	b.ReportMetric(t, "top-ns")
	b.ReportMetric(100*(t-p)/p, "top-%")
}
