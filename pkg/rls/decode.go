package rls

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Why the service registers its own grpc.ServiceDesc:
//
// The generated handler has grpc-go decode the request before any code of
// ours runs, and grpc-go answers a message that does not decode with
// INTERNAL, written to the stream at once, so no handler or interceptor can
// answer otherwise or count it. Go's protobuf refuses a proto3 string that
// is not valid UTF-8, which clients can send (C++ protobuf, Envoy's, only
// logs it), so such a descriptor key or value got INTERNAL and was missing
// from envoy_rls_requests_total.
//
// The handler below asks grpc-go only for the message's bytes: an
// emptypb.Empty keeps every field as unknown bytes without looking at
// strings or nested messages. It decodes them itself, and a request that does
// not decode gets INVALID_ARGUMENT naming the field, counted like every
// other invalid request. Only bytes that are not protobuf at the top level
// (a truncated field, a bad tag) still fail inside grpc-go, as before.
//
// Otherwise it is the generated handler: same service and method names and
// proto file (so reflection and clients see no difference), and interceptors
// run on the decoded request; a request that does not decode reaches no
// interceptor, as with the generated handler.

// Register adds the service to a gRPC server.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	// The generated description with our handler in place of its method's:
	// names, handler type and proto file stay the generated ones.
	desc := pb.RateLimitService_ServiceDesc
	desc.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: s.handleShouldRateLimit}}
	g.RegisterService(&desc, s)
}

// handleShouldRateLimit is the grpc.MethodHandler of ShouldRateLimit.
func (s *Service) handleShouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	var start time.Time
	if s.cfg.Metrics != nil {
		start = time.Now()
	}
	var raw emptypb.Empty
	if err := dec(&raw); err != nil {
		return nil, err
	}
	req, err := decodeRequest(raw.ProtoReflect().GetUnknown())
	if err != nil {
		return nil, s.undecodable(start, "rls: invalid request: "+err.Error())
	}
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*pb.RateLimitRequest))
	})
}

// undecodable answers a request that could not be decoded with
// INVALID_ARGUMENT and msg, and counts it as the invalid requests of an
// unknown domain are counted: its domain was never read.
func (s *Service) undecodable(start time.Time, msg string) error {
	err := status.Error(codes.InvalidArgument, msg)
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.observeRequest(UnknownDomainLabel, nil, err, time.Since(start))
	}
	return err
}

// decodeRequest decodes a wire-format RateLimitRequest. Its errors name
// the field, as validate does, when a string is not valid UTF-8.
func decodeRequest(b []byte) (*pb.RateLimitRequest, error) {
	req := new(pb.RateLimitRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		if path := invalidUTF8(req.ProtoReflect().Descriptor(), b, ""); path != "" {
			return nil, fmt.Errorf("%s: not valid UTF-8 (protobuf strings must be)", path)
		}
		return nil, fmt.Errorf("decode RateLimitRequest: %w", err)
	}
	return req, nil
}

// invalidUTF8 returns the path of the first string field in b, an encoded
// message of type md, that is not valid UTF-8, spelled as validate spells
// paths and prefixed by prefix; "" if there is none or b is not well formed
// enough to say.
func invalidUTF8(md protoreflect.MessageDescriptor, b []byte, prefix string) string {
	seen := map[protowire.Number]int{} // occurrences so far: a repeated field's index
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		path := prefix + string(fd.Name())
		if fd.IsList() {
			path = fmt.Sprintf("%s[%d]", path, seen[num])
			seen[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return path
			}
		case protoreflect.MessageKind:
			if p := invalidUTF8(fd.Message(), v, path+"."); p != "" {
				return p
			}
		}
	}
	return ""
}
