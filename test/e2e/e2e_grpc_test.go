package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	refpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// TestReflectionAndHealth does what grpcurl does without proto files: list
// the services through server reflection and resolve the rate-limit service's
// method from the served descriptors; then asks the health service.
func TestReflectionAndHealth(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()

	stream, err := refpb.NewServerReflectionClient(s.grpcConn()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection stream: %v", err)
	}
	ask := func(req *refpb.ServerReflectionRequest) *refpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatalf("reflection send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reflection recv: %v", err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection error for %v: %v", req, e)
		}
		return resp
	}

	var names []string
	list := ask(&refpb.ServerReflectionRequest{MessageRequest: &refpb.ServerReflectionRequest_ListServices{}})
	for _, svc := range list.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{rlsService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}

	files := ask(&refpb.ServerReflectionRequest{MessageRequest: &refpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: rlsService}})
	var methods []string
	for _, raw := range files.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatalf("decode file descriptor: %v", err)
		}
		for _, svc := range fd.GetService() {
			if fd.GetPackage()+"."+svc.GetName() != rlsService {
				continue
			}
			for _, m := range svc.GetMethod() {
				methods = append(methods, m.GetName()+"("+m.GetInputType()+")")
			}
		}
	}
	if want := "ShouldRateLimit(.envoy.service.ratelimit.v3.RateLimitRequest)"; !slices.Contains(methods, want) {
		t.Errorf("reflection describes %s with methods %v, want %s", rlsService, methods, want)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	health := healthpb.NewHealthClient(s.grpcConn())
	for _, svc := range []string{"", rlsService, "ratelimit"} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health check %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health check %q: %v, want SERVING", svc, resp.GetStatus())
		}
	}
	s.stop()
}

// TestBadRequests sends malformed and oversized requests; each gets
// INVALID_ARGUMENT naming the field and the limit. The size limits are set
// by flags, so this also shows the flags reach the service.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--max-descriptors=3", "--max-entries=2", "--max-key-bytes=8", "--max-value-bytes=16")
	many := func(n int) []*rlv3.RateLimitDescriptor {
		var ds []*rlv3.RateLimitDescriptor
		for range n {
			ds = append(ds, desc("user", "u"))
		}
		return ds
	}
	tests := []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: many(1)}, "domain: must not be empty"},
		{"domain too long", &pb.RateLimitRequest{Domain: strings.Repeat("d", 17), Descriptors: many(1)}, "domain: 17 bytes exceeds the limit of 16"},
		{"no descriptors", &pb.RateLimitRequest{Domain: "shop"}, "descriptors: must not be empty"},
		{"too many descriptors", &pb.RateLimitRequest{Domain: "shop", Descriptors: many(4)}, "descriptors: 4 descriptors exceed the limit of 3"},
		{"empty descriptor", &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc()}}, "descriptors[0].entries: must not be empty"},
		{"too many entries", &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "1", "b", "2", "c", "3")}},
			"descriptors[0].entries: 3 entries exceed the limit of 2"},
		{"empty key", &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u"), desc("", "v")}},
			"descriptors[1].entries[0].key: must not be empty"},
		{"key too long", &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "u", "k23456789", "v")}},
			"descriptors[0].entries[1].key: 9 bytes exceeds the limit of 8"},
		{"value too long", &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", strings.Repeat("v", 17))}},
			"descriptors[0].entries[0].value: 17 bytes exceeds the limit of 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			resp, err := s.rls().ShouldRateLimit(ctx, tt.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, %v; want INVALID_ARGUMENT", resp, err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.want) {
				t.Errorf("message %q, want it to contain %q", msg, tt.want)
			}
		})
	}
	// Requests within the limits are still served.
	if got := s.ask("shop", many(3)...).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("3 descriptors (the limit): %v, want OK", got)
	}
	if code, body := s.get("/readyz"); code != 200 {
		t.Errorf("/readyz after bad requests: %d %s", code, body)
	}
	s.stop()
}
