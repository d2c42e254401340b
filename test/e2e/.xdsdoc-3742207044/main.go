package main

import (
	"context"
	"flag"
	"log"
	"net"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "listen address")
	node := flag.String("node", "default", "node id of the envoy-rls replicas (--xds-node-id)")
	flag.Parse()

	rules := &rlsconf.RateLimitConfig{
		Name:   "api-rules",
		Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:   "path",
			Value: "/login",
			RateLimit: &rlsconf.RateLimitPolicy{
				Name:            "logins",
				Unit:            rlsconf.RateLimitUnit_MINUTE,
				RequestsPerUnit: 3,
			},
		}},
	}
	snapshot, err := cache.NewSnapshot("v1", map[resource.Type][]types.Resource{
		resource.RateLimitConfigType: {rules},
	})
	if err != nil {
		log.Fatal(err)
	}
	snapshots := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	// A new version is pushed to every replica with this node id.
	if err := snapshots.SetSnapshot(context.Background(), *node, snapshot); err != nil {
		log.Fatal(err)
	}

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(context.Background(), snapshots, nil))
	log.Printf("xds management server on %s", lis.Addr())
	log.Fatal(g.Serve(lis))
}
