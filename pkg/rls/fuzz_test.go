package rls

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzShouldRateLimit feeds arbitrary wire-format requests to the service,
// decoded as the gRPC handler decodes them: it must never panic, and every
// answer is either a well-formed response or an error (InvalidArgument from
// the service, or a decoding error that names what is wrong).
func FuzzShouldRateLimit(f *testing.F) {
	for _, r := range []*pb.RateLimitRequest{
		request("d", desc("a=1")),
		request("d", desc("a=1"), desc("b=2"), desc("free=x")),
		{Domain: "d", HitsAddend: 7, Descriptors: request("d", desc("b=1", "c=2")).Descriptors},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x02d\xff\x12\x08\x0a\x06\x0a\x01a\x12\x01\xc3")) // domain and a value not UTF-8
	s, _ := newTestService(f, twoRules, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeRequest(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("decoding %q failed without saying why", data)
			}
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if resp.GetOverallCode() == pb.RateLimitResponse_UNKNOWN || len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("malformed response %v for %v", resp, req)
		}
	})
}
