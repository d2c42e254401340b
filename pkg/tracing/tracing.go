// Package tracing traces rate-limit calls with the OpenTelemetry SDK and
// exports the spans over OTLP: one server span per ShouldRateLimit (its
// domain, descriptor count and code), joined to the caller's trace when
// the call carries W3C trace context, and a child span for each backend
// call (the Redis round trip). The exporter takes its endpoint, headers,
// TLS and timeout from the standard OTEL_EXPORTER_OTLP_* variables, as the
// OTel SDK reads them; everything else comes from Options.
//
// It plugs into the service through rls.RequestTracer and wraps the
// backend from outside (Backend), so neither the service nor the
// backends know a tracing library. When tracing is off nothing here is
// built and the request path only checks a nil interface.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.30.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Protocols of the OTLP exporter.
const (
	ProtocolHTTP = "http" // OTLP/HTTP protobuf, port 4318: the reference's default
	ProtocolGRPC = "grpc" // OTLP/gRPC, port 4317
)

// Options configure a Provider.
type Options struct {
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// service.* resource attributes (TRACING_SERVICE_NAME, _NAMESPACE,
	// _INSTANCE_ID); empty namespace and instance are left out.
	ServiceName       string
	ServiceNamespace  string
	ServiceInstanceID string
	// ServiceVersion is the build's version.
	ServiceVersion string
	// SamplingRate is the share of new traces sampled, in [0, 1]
	// (TRACING_SAMPLING_RATE); a call whose caller sampled (or not) follows
	// the caller.
	SamplingRate float64
	// Protocol is ProtocolHTTP or ProtocolGRPC (TRACING_EXPORTER_PROTOCOL).
	Protocol string
}

// Validate names the first bad field.
func (o Options) Validate() error {
	switch {
	case o.ServiceName == "":
		return errors.New("tracing: no service name")
	case !(o.SamplingRate >= 0 && o.SamplingRate <= 1):
		return fmt.Errorf("tracing: sampling rate %v: want a number in [0, 1]", o.SamplingRate)
	case o.Protocol != ProtocolHTTP && o.Protocol != ProtocolGRPC:
		return fmt.Errorf("tracing: exporter protocol %q: want %s or %s", o.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	return nil
}

// Provider owns the tracer provider and its exporter.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// tracerName names the instrumentation scope.
const tracerName = "github.com/envoy-rls/envoy-rls"

// New builds the exporter and the provider. The exporter connects lazily,
// so an unreachable collector does not stop the start: spans it cannot
// take are dropped and logged by the SDK.
func New(ctx context.Context, o Options) (*Provider, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var client otlptrace.Client
	if o.Protocol == ProtocolGRPC {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP %s exporter: %w", o.Protocol, err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName)}
	if o.ServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(o.ServiceNamespace))
	}
	if o.ServiceInstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.ServiceInstanceID))
	}
	if o.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.ServiceVersion))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
	)
	return newProvider(tp), nil
}

func newProvider(tp *sdktrace.TracerProvider) *Provider {
	return &Provider{tp: tp, tracer: tp.Tracer(tracerName), prop: propagation.TraceContext{}}
}

// Shutdown exports the spans still buffered, waiting at most until ctx
// ends, and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Span attribute keys.
const (
	attrDomain      = attribute.Key("ratelimit.domain")
	attrDescriptors = attribute.Key("ratelimit.descriptors")
	attrCode        = attribute.Key("ratelimit.code")
	attrChecks      = attribute.Key("ratelimit.checks")
)

// Start implements rls.RequestTracer: a server span named ShouldRateLimit,
// child of the trace context in the call's gRPC metadata, if any.
func (p *Provider) Start(ctx context.Context, domain string, descriptors int) (context.Context, rls.RequestSpan) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = p.prop.Extract(ctx, mdCarrier(md))
	}
	ctx, span := p.tracer.Start(ctx, "ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrDomain.String(domain), attrDescriptors.Int(descriptors)))
	return ctx, requestSpan{span}
}

type requestSpan struct{ span trace.Span }

func (s requestSpan) Finish(code string, err error) {
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.SetAttributes(attrCode.String(code))
	s.span.End()
}

// mdCarrier reads W3C trace context from gRPC metadata, whose keys are
// lower case as the traceparent header's are.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Applier is the backend a Backend wraps: the backend layer contract,
// algo.Applier.
type Applier = algo.Applier

// Backend wraps next so that each call is a client span named name (the
// backend: "redis"), child of the request's span.
func (p *Provider) Backend(next Applier, name string) Applier {
	return backend{next: next, name: name, tracer: p.tracer}
}

type backend struct {
	next   Applier
	name   string
	tracer trace.Tracer
}

func (b backend) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	ctx, span := b.tracer.Start(ctx, b.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrChecks.Int(len(checks)), semconv.DBSystemNameKey.String(b.name)))
	defer span.End()
	d, err := b.next.Apply(ctx, now, checks)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return d, err
}
