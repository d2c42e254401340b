// Command xds-control-plane is the smallest xDS management server for
// envoy-rls's xDS rule source (docs/xds.md): go-control-plane's SotW server
// over a snapshot cache, serving the RateLimitConfig of a YAML file to the
// replicas of one node id, and pushing a new version whenever the file
// changes. It is an example to run with `go run`, not part of envoy-rls: it
// imports none of envoy-rls's packages, only go-control-plane, gRPC and a
// YAML decoder.
//
//	go run ./examples/xds-control-plane
//	envoy-rls serve --config-source=xds --xds-server=127.0.0.1:18000
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "listen address")
	node := flag.String("node", "default", "node id of the envoy-rls replicas (their --xds-node-id)")
	file := flag.String("rules", "examples/xds-control-plane/rules.yaml", "YAML file of one RateLimitConfig, re-read every -poll")
	poll := flag.Duration("poll", 500*time.Millisecond, "how often the rules file is checked for changes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *node, *file, *poll); err != nil {
		log.Fatal(err)
	}
}

// run serves the rules of file until ctx ends, pushing a new snapshot
// version each time the file's content changes.
func run(ctx context.Context, addr, node, file string, poll time.Duration) error {
	snapshots := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	var last []byte
	version := 0
	push := func() error {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("read the rules: %w", err)
		}
		if bytes.Equal(data, last) {
			return nil
		}
		rules, err := parseRules(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		version++
		snap, err := cache.NewSnapshot(fmt.Sprintf("v%d", version), map[resource.Type][]types.Resource{
			resource.RateLimitConfigType: {rules},
		})
		if err != nil {
			return err
		}
		// Every replica with this node id gets the new version.
		if err := snapshots.SetSnapshot(ctx, node, snap); err != nil {
			return err
		}
		last = data
		log.Printf("pushed version v%d of %s (domain %q) to node %q", version, file, rules.GetDomain(), node)
		return nil
	}
	if err := push(); err != nil {
		return err
	}

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, snapshots, nil))
	log.Printf("xds management server on %s", lis.Addr())
	go func() {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				g.GracefulStop()
				return
			case <-t.C:
				// A bad edit is logged and the last good version stays.
				if err := push(); err != nil {
					log.Printf("not pushed: %v", err)
				}
			}
		}
	}()
	return g.Serve(lis)
}

// parseRules decodes one RateLimitConfig from YAML, with protojson's field
// names (rate_limit or rateLimit) and enum names (unit: MINUTE).
func parseRules(data []byte) (*rlsconf.RateLimitConfig, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	rules := &rlsconf.RateLimitConfig{}
	if err := protojson.Unmarshal(js, rules); err != nil {
		return nil, err
	}
	return rules, nil
}
