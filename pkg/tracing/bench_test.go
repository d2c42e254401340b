package tracing

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// BenchmarkTracing measures one ShouldRateLimit on the in-process store
// with tracing off (no Tracer: what serve builds without --tracing),
// on with every new trace sampled out (rate 0), and on with every call
// sampled into an in-memory exporter. "off" adds two nil checks to the
// request path; BENCHMARKS.md compares it with the same call built
// without the tracing hooks.
func BenchmarkTracing(b *testing.B) {
	snap := rulestest.Snapshot(b, "bench.yaml", `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10000000, algorithm: token_bucket}
`, rules.Options{})
	req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}
	for _, bc := range []struct {
		name   string
		tracer func() *Provider // nil: off
	}{
		{"off", nil},
		{"on/sampled-out", func() *Provider { return inMemory(sdktrace.NeverSample()) }},
		{"on/sampled", func() *Provider { return inMemory(sdktrace.AlwaysSample()) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store, err := memstore.New(memstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			cfg := rls.Config{Rules: func() *rules.Snapshot { return snap }, Backend: store}
			if bc.tracer != nil {
				p := bc.tracer()
				cfg.Tracer, cfg.Backend = p, p.Backend(store, "memstore")
			}
			s, err := rls.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			run := func() {
				if _, err := s.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			run()
			b.ReportAllocs()
			for b.Loop() {
				run()
			}
		})
	}
}

// inMemory is a Provider exporting to memory, with sampler.
func inMemory(sampler sdktrace.Sampler) *Provider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
	return newProvider(tp)
}
