package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

// grpcRules limit the gRPC route of grpcBootstrap: two calls a minute.
const grpcRules = `domain: edge
descriptors:
  - key: generic_key
    value: grpc_health
    rate_limit: {name: grpc_health, unit: minute, requests_per_unit: 2}
`

// startGRPCUpstream serves the standard gRPC health service on loopback.
func startGRPCUpstream(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}

// grpcBootstrap is envoy.yaml with its rate-limit filter changed by edit,
// one route to a gRPC (HTTP/2) cluster grpc_health, and one descriptor on
// it, [("generic_key", "grpc_health")].
func grpcBootstrap(t testing.TB, edit func(filter map[string]any)) []byte {
	t.Helper()
	doc := shippedBootstrap(t)
	edit(rateLimitFilter(t, doc))
	patient(rateLimitFilter(t, doc))
	ingressHCM(t, doc)["route_config"] = map[string]any{
		"name": "grpc",
		"virtual_hosts": []any{map[string]any{
			"name": "grpc", "domains": []any{"*"},
			"routes": []any{map[string]any{
				"match": map[string]any{"prefix": "/"},
				"route": map[string]any{
					"cluster": "grpc_health",
					"rate_limits": []any{map[string]any{"actions": []any{
						map[string]any{"generic_key": map[string]any{"descriptor_value": "grpc_health"}},
					}}},
				},
			}},
		}},
	}
	// A copy of echo that speaks HTTP/2, as a gRPC upstream must.
	static := bootstrapPath(t, doc, "static_resources")
	grpcCluster := map[string]any{}
	for k, v := range cluster(t, doc, "echo") {
		grpcCluster[k] = v
	}
	grpcCluster["name"] = "grpc_health"
	grpcCluster["typed_extension_protocol_options"] = cluster(t, doc, "envoy_rls")["typed_extension_protocol_options"]
	static["clusters"] = append(static["clusters"].([]any), grpcCluster)
	return encodeBootstrap(t, doc)
}

// gatewayFilter is the rate-limit filter's typed_config of the shipped
// gateway EnvoyFilter (its first patch), pointed at the test's envoy_rls
// cluster instead of Istio's name for the Service.
func gatewayFilter(t testing.TB) map[string]any {
	t.Helper()
	var ef map[string]any
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, "manifests/istio/envoyfilter-gateway.yaml"), &ef); err != nil {
		t.Fatalf("parse the gateway EnvoyFilter: %v", err)
	}
	patches, _ := bootstrapPath(t, ef, "spec")["configPatches"].([]any)
	if len(patches) == 0 {
		t.Fatal("the gateway EnvoyFilter has no configPatches")
	}
	value := bootstrapPath(t, patches[0].(map[string]any), "patch", "value")
	if value["name"] != "envoy.filters.http.ratelimit" {
		t.Fatalf("the gateway EnvoyFilter's first patch adds %v, want the rate-limit filter", value["name"])
	}
	f := bootstrapPath(t, value, "typed_config")
	bootstrapPath(t, f, "rate_limit_service", "grpc_service", "envoy_grpc")["cluster_name"] = "envoy_rls"
	return f
}

// TestGRPCRateLimitedAsResourceExhausted: behind the rate-limit filter, a
// gRPC client over its limit sees RESOURCE_EXHAUSTED when the filter sets
// rate_limited_as_resource_exhausted (as the shipped EnvoyFilters and the
// chart do, README's "The EnvoyFilters set ..."; the gateway's filter is
// run as shipped), and UNAVAILABLE, the status gRPC clients retry, when it
// does not (envoy.yaml as shipped); an HTTP client of the same route still
// gets 429.
func TestGRPCRateLimitedAsResourceExhausted(t *testing.T) {
	for _, st := range stores {
		for _, tc := range []struct {
			filter string
			edit   func(t *testing.T, filter map[string]any)
			want   codes.Code
		}{
			{"envoy.yaml with the flag", func(t *testing.T, f map[string]any) {
				f["rate_limited_as_resource_exhausted"] = true
			}, codes.ResourceExhausted},
			{"envoy.yaml", func(t *testing.T, f map[string]any) {
				if _, set := f["rate_limited_as_resource_exhausted"]; set {
					t.Fatal("envoy.yaml sets rate_limited_as_resource_exhausted; this case wants Envoy's default (false)")
				}
			}, codes.Unavailable},
			{"the gateway EnvoyFilter's", func(t *testing.T, f map[string]any) {
				shipped := gatewayFilter(t)
				clear(f)
				for k, v := range shipped {
					f[k] = v
				}
			}, codes.ResourceExhausted},
		} {
			t.Run(string(st)+"/"+tc.filter, func(t *testing.T) {
				backend := startGRPCUpstream(t)
				s := startStack(t, stackOpts{Store: st,
					Rules:     map[string]string{"grpc.yaml": grpcRules},
					Bootstrap: grpcBootstrap(t, func(f map[string]any) { tc.edit(t, f) }),
					Addresses: envoytest.Addresses{Clusters: map[string]string{"grpc_health": backend}},
				})
				conn, err := grpc.NewClient(s.URL[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				client := healthpb.NewHealthClient(conn)
				var got []codes.Code
				for range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
					cancel()
					got = append(got, status.Code(err))
				}
				if want := fmt.Sprint([]codes.Code{codes.OK, codes.OK, tc.want}); fmt.Sprint(got) != want {
					t.Errorf("three health checks through Envoy: %v, want %s", got, want)
				}
				if n := s.limitDecisions(t, "grpc_health", "over_limit"); n != 1 {
					t.Errorf("envoy-rls counted %v grpc_health denials, want 1", n)
				}
				if a := s.mustDo(t, request{Path: "/grpc.health.v1.Health/Check"}); a.Status != http.StatusTooManyRequests {
					t.Errorf("an HTTP client over the same limit: %v, want 429", a)
				}
			})
		}
	}
}
