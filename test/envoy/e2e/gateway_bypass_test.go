package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/istiopatch"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// TestNoPathBypassAtTheGateway runs pathBypassCases through a real Envoy
// configured as an Istio ingress gateway with the shipped gateway
// EnvoyFilter applied (internal/testkit/istiopatch, as istiod would): the
// kustomize base's and the Helm chart's with its default values. The
// gateway routes as docs/deploying.md's VirtualService says (a route
// named login for /api/login and its subpaths, then a catch-all) and
// normalizes paths as Istio does with the pathNormalization the docs ask
// for (DECODE_AND_MERGE_SLASHES: %2F is decoded by a redirect, which the
// client follows).
func TestNoPathBypassAtTheGateway(t *testing.T) {
	root := repoPath(".")
	for _, v := range []struct {
		name   string
		render func(t *testing.T) ([]byte, error)
	}{
		{"kustomize", func(t *testing.T) ([]byte, error) {
			fsys, err := shipped.VariantFS(root, nil, nil)
			if err != nil {
				return nil, err
			}
			return shipped.KustomizeBuild(fsys, "/"+shipped.ManifestsDir)
		}},
		{"helm", func(t *testing.T) ([]byte, error) {
			return shipped.Helm(root, t.TempDir(), "template", "envoy-rls", shipped.ChartDir, "--namespace", "envoy-rls")
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			out, err := v.render(t)
			if err != nil {
				t.Fatal(err)
			}
			filter := gatewayEnvoyFilter(t, out)
			boot, rlsCluster := istioGatewayBootstrap(t, filter)
			runPathBypassCases(t, stackOpts{Bootstrap: boot, RLSCluster: rlsCluster})
		})
	}
}

// gatewayEnvoyFilter is the EnvoyFilter envoy-rls-gateway of a rendered
// stream.
func gatewayEnvoyFilter(t *testing.T, stream []byte) istiopatch.Filter {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatal(err)
		}
		if head.Kind == "EnvoyFilter" && head.Metadata.Name == "envoy-rls-gateway" {
			f, err := istiopatch.ParseSpec(head.Metadata.Namespace+"/"+head.Metadata.Name, head.Spec)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("no EnvoyFilter envoy-rls-gateway in the rendered manifests")
	return istiopatch.Filter{}
}

// istioGatewayBootstrap is an ingress gateway's listener (named ingress,
// on the istioctl gateway's port 8080) and upstream (echo), with the
// filter applied and the rate-limit filter's timeout raised to
// patientTimeout; it returns the bootstrap and the name of the cluster
// the rate-limit filter calls, which it adds (HTTP/2, as istiod's for a
// gRPC port).
func istioGatewayBootstrap(t *testing.T, f istiopatch.Filter) ([]byte, string) {
	t.Helper()
	route := func(name string, match map[string]any) map[string]any {
		return map[string]any{"name": name, "match": match, "route": map[string]any{"cluster": "echo"}}
	}
	hcm := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "outbound_0.0.0.0_8080",
		// meshConfig.pathNormalization DECODE_AND_MERGE_SLASHES.
		"normalize_path":                   true,
		"merge_slashes":                    true,
		"path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
		"route_config": map[string]any{
			"name": "http.8080",
			"virtual_hosts": []any{map[string]any{
				"name":    "edge.example.com:80",
				"domains": []any{"*"},
				"routes": []any{
					route("login", map[string]any{"safe_regex": map[string]any{"regex": "/api/login(/.*)?"}}),
					route("default", map[string]any{"prefix": "/"}),
				},
			}},
		},
		"http_filters": []any{map[string]any{"name": "envoy.filters.http.router", "typed_config": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
	}
	cluster := func(name string) map[string]any {
		return map[string]any{"name": name, "type": "STATIC", "connect_timeout": "1s",
			"load_assignment": map[string]any{"cluster_name": name, "endpoints": []any{map[string]any{"lb_endpoints": []any{
				map[string]any{"endpoint": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 1}}}},
			}}}}}
	}
	boot := map[string]any{
		"admin": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}},
		"static_resources": map[string]any{
			"listeners": []any{map[string]any{
				"name":          "ingress",
				"address":       map[string]any{"socket_address": map[string]any{"address": "0.0.0.0", "port_value": 8080}},
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}}}},
			}},
			"clusters": []any{cluster("echo")},
		},
	}
	if _, err := istiopatch.Apply(boot, istiopatch.Gateway, f); err != nil {
		t.Fatal(err)
	}
	var rlsCluster string
	for _, hf := range hcm["http_filters"].([]any) {
		hfm := hf.(map[string]any)
		if hfm["name"] != "envoy.filters.http.ratelimit" {
			continue
		}
		tc := hfm["typed_config"].(map[string]any)
		patient(tc)
		rlsCluster, _ = bootstrapPath(t, tc, "rate_limit_service", "grpc_service", "envoy_grpc")["cluster_name"].(string)
	}
	if rlsCluster == "" {
		t.Fatalf("the EnvoyFilter added no rate-limit filter with a cluster: %v", hcm["http_filters"])
	}
	c := cluster(rlsCluster)
	c["typed_extension_protocol_options"] = map[string]any{
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
			"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
		},
	}
	sr := boot["static_resources"].(map[string]any)
	sr["clusters"] = append(sr["clusters"].([]any), c)
	out, err := json.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	return out, rlsCluster
}
