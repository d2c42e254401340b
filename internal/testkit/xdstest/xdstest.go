// Package xdstest runs a real xDS management server for tests:
// go-control-plane's SotW server over a snapshot cache, on a loopback
// port, serving RateLimitConfig resources. It records every request the
// server receives, so tests can see ACKs and NACKs where the control plane
// sees them. It is test support only and must not be imported by
// non-test code.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is a management server. Its methods are safe for concurrent use.
type Server struct {
	// Addr is the loopback host:port it listens on; a restart keeps it.
	Addr string

	tb    testing.TB
	tls   *tls.Config
	cache cache.SnapshotCache

	mu       sync.Mutex
	grpc     *grpc.Server
	requests []Request
}

// Request is one discovery request the server received, with the
// request metadata of its stream.
type Request struct {
	*discovery.DiscoveryRequest
	Metadata metadata.MD
}

// IsNACK reports whether the request refuses the response it names.
func (r Request) IsNACK() bool { return r.GetErrorDetail() != nil }

// IsACK reports whether the request accepts the push of version v.
func (r Request) IsACK(v string) bool {
	return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == v
}

// Start starts a server on a free loopback port, stopped at the end of
// the test; tlsCfg, when set, makes it serve TLS (with mTLS when tlsCfg
// requires client certificates).
func Start(tb testing.TB, tlsCfg *tls.Config) *Server {
	tb.Helper()
	s := &Server{tb: tb, tls: tlsCfg, cache: cache.NewSnapshotCache(false, cache.IDHash{}, nil)}
	s.serve("127.0.0.1:0")
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(addr string) {
	s.tb.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.tb.Fatalf("xdstest: listen %s: %v", addr, err)
	}
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(opts...)
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(int64, *discovery.DiscoveryRequest) error { return nil }}
	s.mu.Lock()
	xds := serverv3.NewServer(context.Background(), s.cache, cb)
	s.mu.Unlock()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, recorder{AggregatedDiscoveryServiceServer: xds, s: s})
	s.mu.Lock()
	s.Addr, s.grpc = lis.Addr().String(), g
	s.mu.Unlock()
	go func() { _ = g.Serve(lis) }()
}

// recorder records every request of every stream before the real server
// sees it.
type recorder struct {
	discovery.AggregatedDiscoveryServiceServer
	s *Server
}

func (r recorder) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	return r.AggregatedDiscoveryServiceServer.StreamAggregatedResources(recordingStream{stream, r.s, md})
}

type recordingStream struct {
	discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	s  *Server
	md metadata.MD
}

func (r recordingStream) Recv() (*discovery.DiscoveryRequest, error) {
	req, err := r.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv()
	if err == nil {
		r.s.mu.Lock()
		r.s.requests = append(r.s.requests, Request{DiscoveryRequest: req, Metadata: r.md})
		r.s.mu.Unlock()
	}
	return req, err
}

// Set makes node's snapshot version hold confs.
func (s *Server) Set(node, version string, confs ...*rlsconf.RateLimitConfig) {
	s.tb.Helper()
	res := make([]cachev3.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]cachev3.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.tb.Fatalf("xdstest: snapshot %s: %v", version, err)
	}
	s.mu.Lock()
	c := s.cache
	s.mu.Unlock()
	if err := c.SetSnapshot(context.Background(), node, snap); err != nil {
		s.tb.Fatalf("xdstest: set snapshot %s: %v", version, err)
	}
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Find returns the first request received that match accepts.
func (s *Server) Find(match func(Request) bool) (Request, bool) {
	for _, r := range s.Requests() {
		if match(r) {
			return r, true
		}
	}
	return Request{}, false
}

// Stop stops the server, closing every stream.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.mu.Unlock()
	g.Stop()
}

// Restart stops the server and starts a new one on the same address with
// an empty cache, as a restarted management server comes back with no
// snapshot until its control loop sets one; requests are kept.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.mu.Lock()
	s.cache = cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	addr := s.Addr
	s.mu.Unlock()
	s.serve(addr)
}

// Limit is a descriptor key (and value, when not empty) limited to rpu
// requests per unit.
func Limit(key, value string, unit rlsconf.RateLimitUnit, rpu uint32) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{Key: key, Value: value,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}
}

// Config is a RateLimitConfig resource named name for domain.
func Config(name, domain string, descs ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: descs}
}
