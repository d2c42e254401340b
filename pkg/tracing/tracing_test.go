package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/otlptest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// okBackend admits every check; failBackend fails.
type okBackend struct{}

func (okBackend) Apply(_ context.Context, _ time.Time, checks []algo.Check) ([]algo.Decision, error) {
	return make([]algo.Decision, len(checks)), nil
}

type failBackend struct{}

func (failBackend) Apply(context.Context, time.Time, []algo.Check) ([]algo.Decision, error) {
	return nil, errors.New("redis: connection refused")
}

const parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// traceOne runs one traced call the way the service does: the server
// span from the incoming metadata, the backend's span inside it.
func traceOne(t *testing.T, p *Provider, b Applier, code string) {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("traceparent", "00-"+parentTrace+"-00f067aa0ba902b7-01"))
	ctx, span := p.Start(ctx, "first-listener", 2)
	_, err := p.Backend(b, "redis").Apply(ctx, time.Now(), make([]algo.Check, 3))
	span.Finish(code, err)
}

// TestExportOTLP: spans reach a real OTLP receiver, over HTTP (the
// reference's and Envoy Gateway's default) and gRPC, with the service's
// resource, the request's attributes, the caller's trace, and the backend
// span as the request span's child.
func TestExportOTLP(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		start    func(*testing.T) *otlptest.Receiver
		endpoint func(*otlptest.Receiver) string
	}{
		{ProtocolHTTP, otlptest.StartHTTP, func(r *otlptest.Receiver) string { return r.Endpoint }},
		{ProtocolGRPC, otlptest.StartGRPC, func(r *otlptest.Receiver) string { return "http://" + r.Endpoint }},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			r := tc.start(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint(r))
			p, err := New(context.Background(), Options{ServiceName: "envoy-ratelimit", ServiceNamespace: "envoy-gateway-system",
				ServiceInstanceID: "pod-1", SamplingRate: 1, Protocol: tc.protocol})
			if err != nil {
				t.Fatal(err)
			}
			traceOne(t, p, okBackend{}, "OK")
			traceOne(t, p, failBackend{}, "UNKNOWN")
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			eventually.Holds(t, "4 spans", func() bool { return len(r.Spans()) == 4 })

			reqs, backends := r.Named("ShouldRateLimit"), r.Named("redis")
			if len(reqs) != 2 || len(backends) != 2 {
				t.Fatalf("spans %d ShouldRateLimit, %d redis; want 2 each", len(reqs), len(backends))
			}
			for i, s := range reqs {
				if got := hex.EncodeToString(s.GetTraceId()); got != parentTrace {
					t.Errorf("span %d trace %s, want the caller's %s", i, got, parentTrace)
				}
				if s.Attr("ratelimit.domain") != "first-listener" || s.Attr("ratelimit.descriptors") != "2" {
					t.Errorf("span %d attributes %v", i, s.GetAttributes())
				}
				for k, v := range map[string]string{"service.name": "envoy-ratelimit", "service.namespace": "envoy-gateway-system", "service.instance.id": "pod-1"} {
					if s.Resource[k] != v {
						t.Errorf("resource %s = %q, want %q", k, s.Resource[k], v)
					}
				}
				b := backends[i]
				if string(b.GetParentSpanId()) != string(s.GetSpanId()) || b.Attr("ratelimit.checks") != "3" {
					t.Errorf("backend span %d: parent %x (want %x), attributes %v", i, b.GetParentSpanId(), s.GetSpanId(), b.GetAttributes())
				}
			}
			if reqs[0].Attr("ratelimit.code") != "OK" || reqs[1].Attr("ratelimit.code") != "UNKNOWN" {
				t.Errorf("codes %q %q, want OK UNKNOWN", reqs[0].Attr("ratelimit.code"), reqs[1].Attr("ratelimit.code"))
			}
			if reqs[1].GetStatus().GetCode() != 2 || backends[1].GetStatus().GetCode() != 2 { // STATUS_CODE_ERROR
				t.Errorf("failed call's statuses %v, %v; want errors", reqs[1].GetStatus(), backends[1].GetStatus())
			}
		})
	}
}

// TestSamplingRateZero: a rate of 0 samples no new trace, while a call
// whose caller sampled its trace is still traced.
func TestSamplingRateZero(t *testing.T) {
	r := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	p, err := New(context.Background(), Options{ServiceName: "s", SamplingRate: 0, Protocol: ProtocolHTTP})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Start(context.Background(), "new-trace", 1)
	span.Finish("OK", nil)
	traceOne(t, p, okBackend{}, "OK")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually.Holds(t, "the sampled call's 2 spans", func() bool { return len(r.Spans()) >= 2 })
	for _, s := range r.Spans() {
		if s.Attr("ratelimit.domain") == "new-trace" {
			t.Error("a new trace was sampled at rate 0")
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{SamplingRate: 1, Protocol: ProtocolHTTP},
		{ServiceName: "s", SamplingRate: 1.5, Protocol: ProtocolHTTP},
		{ServiceName: "s", SamplingRate: 1, Protocol: "zipkin"},
	} {
		if _, err := New(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
