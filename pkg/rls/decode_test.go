package rls

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// bad stands in for invalid UTF-8 in a request built with the generated
// types, which refuse to encode it; withInvalidUTF8 swaps it for as many
// bytes that are not UTF-8, so the lengths in the encoding stay right.
const bad = "~BAD~"

func withInvalidUTF8(t *testing.T, req *pb.RateLimitRequest) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(bad)) {
		t.Fatalf("%v has no %q to replace", req, bad)
	}
	return bytes.ReplaceAll(b, []byte(bad), []byte("\xc3\x28\xa0\xa1\xff"))
}

// serveGRPC serves s on a loopback gRPC server with opts and returns a
// client connection to it; both stop at cleanup.
func serveGRPC(t *testing.T, s *Service, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	s.Register(gs)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// invokeRaw sends b as the ShouldRateLimit request message, as it is: an
// emptypb.Empty marshals its unknown bytes verbatim.
func invokeRaw(t *testing.T, cc *grpc.ClientConn, b []byte) (*pb.RateLimitResponse, error) {
	t.Helper()
	var m emptypb.Empty
	m.ProtoReflect().SetUnknown(b)
	// A bound only so a hung server fails the test instead of stalling it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := new(pb.RateLimitResponse)
	err := cc.Invoke(ctx, pb.RateLimitService_ShouldRateLimit_FullMethodName, &m, resp)
	return resp, err
}

// TestUndecodableRequest: over a real gRPC server, a request whose
// strings are not UTF-8, or whose descriptors are not protobuf, gets
// INVALID_ARGUMENT naming the field and is counted with the other invalid
// requests; a valid one still goes through the server's interceptor.
func TestUndecodableRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Metrics = NewMetrics(reg) })
	var mu sync.Mutex
	var intercepted []string
	cc := serveGRPC(t, s, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		mu.Lock()
		intercepted = append(intercepted, info.FullMethod+" "+req.(*pb.RateLimitRequest).GetDomain())
		mu.Unlock()
		return next(ctx, req)
	}))
	invalid := func() float64 {
		return testutil.ToFloat64(s.cfg.Metrics.requests.WithLabelValues(UnknownDomainLabel, codes.InvalidArgument.String()))
	}

	// A descriptor field holding a byte that starts a varint and never
	// ends it.
	garbage := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "d")
	garbage = protowire.AppendBytes(protowire.AppendTag(garbage, 2, protowire.BytesType), []byte{0xff})
	tests := []struct {
		name string
		wire []byte
		want string // in the message
	}{
		{"entry value", withInvalidUTF8(t, request("d", desc("a="+bad))), "rls: invalid request: descriptors[0].entries[0].value: not valid UTF-8"},
		{"key of a later entry", withInvalidUTF8(t, request("d", desc("a=1"), desc("b=1", bad+"=2"))), "rls: invalid request: descriptors[1].entries[1].key: not valid UTF-8"},
		{"domain", withInvalidUTF8(t, request(bad, desc("a=1"))), "rls: invalid request: domain: not valid UTF-8"},
		{"descriptor not protobuf", garbage, "rls: invalid request: decode RateLimitRequest: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := invalid()
			resp, err := invokeRaw(t, cc, tt.wire)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("got %v, %v; want INVALID_ARGUMENT with %q", resp, err, tt.want)
			}
			if d := invalid() - before; d != 1 {
				t.Errorf("envoy_rls_requests_total{domain=%q,code=InvalidArgument} moved by %v, want 1", UnknownDomainLabel, d)
			}
		})
	}

	valid, err := proto.Marshal(request("d", desc("a=1")))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := invokeRaw(t, cc, valid); err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("valid request: %v, %v; want OK", resp, err)
	}
	if ok := testutil.ToFloat64(s.cfg.Metrics.requests.WithLabelValues("d", "ok")); ok != 1 {
		t.Errorf("envoy_rls_requests_total{domain=d,code=ok} = %v, want 1", ok)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{pb.RateLimitService_ShouldRateLimit_FullMethodName + " d"}; !reflect.DeepEqual(intercepted, want) {
		t.Errorf("interceptor saw %q, want only the valid request %q", intercepted, want)
	}
}

// TestRegisterLikeGenerated: clients and reflection see the same service
// as the generated registration would show.
func TestRegisterLikeGenerated(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	ours, generated := grpc.NewServer(), grpc.NewServer()
	s.Register(ours)
	pb.RegisterRateLimitServiceServer(generated, s)
	if got, want := ours.GetServiceInfo(), generated.GetServiceInfo(); !reflect.DeepEqual(got, want) {
		t.Fatalf("registered %+v, generated code registers %+v", got, want)
	}
}

// TestJSONUndecodable: /json answers a body that does not decode,
// invalid UTF-8 included, with 400 and counts it as gRPC does.
func TestJSONUndecodable(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Metrics = NewMetrics(reg) })
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	for _, tt := range []struct{ name, body string }{
		{"invalid UTF-8 value", "{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"value\":\"\xc3\x28\"}]}]}"},
		{"invalid UTF-8 domain", "{\"domain\":\"\xff\",\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"value\":\"1\"}]}]}"},
		{"not JSON", `{"domain":`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(s.cfg.Metrics.requests.WithLabelValues(UnknownDomainLabel, codes.InvalidArgument.String()))
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), "rls: decode RateLimitRequest: ") {
				t.Fatalf("got %d %q, want 400 naming the decoding", resp.StatusCode, body.String())
			}
			after := testutil.ToFloat64(s.cfg.Metrics.requests.WithLabelValues(UnknownDomainLabel, codes.InvalidArgument.String()))
			if after-before != 1 {
				t.Errorf("envoy_rls_requests_total{domain=%q,code=InvalidArgument} moved by %v, want 1", UnknownDomainLabel, after-before)
			}
		})
	}
}

// BenchmarkDecodeRequest: what the handler's decoding (the bytes through an
// emptypb.Empty, then the request) costs beside the generated handler's
// (straight into the request), for a one-descriptor, two-entry request.
func BenchmarkDecodeRequest(b *testing.B) {
	wire, err := proto.Marshal(request("bench", desc("user=alice", "path=/v1/orders")))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(wire, new(pb.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var raw emptypb.Empty
			if err := proto.Unmarshal(wire, &raw); err != nil {
				b.Fatal(err)
			}
			if _, err := decodeRequest(raw.ProtoReflect().GetUnknown()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
