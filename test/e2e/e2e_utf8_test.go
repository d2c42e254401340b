package e2e

import (
	"context"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestInvalidUTF8 sends a descriptor value that is not UTF-8 over gRPC and
// over /json: both are invalid requests (INVALID_ARGUMENT naming the field,
// and 400), counted in envoy_rls_requests_total like other invalid
// requests, and the server goes on serving.
func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	labels := map[string]string{"domain": "_unknown", "code": "InvalidArgument"}
	before := s.scrape().get("envoy_rls_requests_total", labels)

	// RateLimitRequest{domain: "shop", descriptors: [{entries: [{key:
	// "user", value: "\xff\xfe"}]}]}, encoded by hand: the generated
	// types refuse to encode it.
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "user")
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), []byte{0xff, 0xfe})
	descriptor := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	wire := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "shop")
	wire = protowire.AppendBytes(protowire.AppendTag(wire, 2, protowire.BytesType), descriptor)
	var raw emptypb.Empty // marshals its unknown bytes as they are
	raw.ProtoReflect().SetUnknown(wire)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	err := s.grpcConn().Invoke(ctx, pb.RateLimitService_ShouldRateLimit_FullMethodName, &raw, new(pb.RateLimitResponse))
	if want := "descriptors[0].entries[0].value: not valid UTF-8"; status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("gRPC: %v; want INVALID_ARGUMENT naming %q", err, want)
	}

	code, body := s.post("/json", "{\"domain\":\"shop\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\xfe\"}]}]}")
	if code != 400 || !strings.Contains(body, "invalid UTF-8") {
		t.Errorf("/json: %d %q; want 400 naming invalid UTF-8", code, body)
	}

	if d := s.scrape().get("envoy_rls_requests_total", labels) - before; d != 2 {
		t.Errorf("envoy_rls_requests_total%v moved by %v, want 2", labels, d)
	}
	if got := s.ask("shop", desc("user", "alice")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("a valid request afterwards: %v, want OK", got)
	}
	s.stop()
}
