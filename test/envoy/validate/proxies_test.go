package validate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/istiopatch"
)

// The workload the shipped sidecar EnvoyFilters select (Istio's httpbin
// sample) and the port its container serves, and the destination of the
// gateway's routes (docs/deploying.md's VirtualService).
const (
	workloadPort   = 8080
	httpbinCluster = "outbound|8000||httpbin.default.svc.cluster.local"
)

// connectionManager is an http_connection_manager as istiod writes it,
// with the HTTP filters every Istio proxy has that upstream Envoy knows
// (fault and CORS; Istio's own, like istio.stats, are not in upstream
// Envoy) before the router, and an inline route configuration.
func connectionManager(statPrefix string, routeConfig map[string]any) map[string]any {
	return map[string]any{
		"name": "envoy.filters.network.http_connection_manager",
		"typed_config": map[string]any{
			"@type":        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
			"stat_prefix":  statPrefix,
			"route_config": routeConfig,
			"http_filters": []any{
				typedFilter("envoy.filters.http.fault", "envoy.extensions.filters.http.fault.v3.HTTPFault"),
				typedFilter("envoy.filters.http.cors", "envoy.extensions.filters.http.cors.v3.Cors"),
				typedFilter("envoy.filters.http.router", "envoy.extensions.filters.http.router.v3.Router"),
			},
		},
	}
}

func typedFilter(name, typ string) map[string]any {
	return map[string]any{"name": name, "typed_config": map[string]any{"@type": "type.googleapis.com/" + typ}}
}

func route(name string, match map[string]any, cluster string) map[string]any {
	return map[string]any{"name": name, "match": match, "route": map[string]any{"cluster": cluster}}
}

func socketAddress(port int) map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": port}}
}

// staticCluster is a cluster with one loopback endpoint (validation never
// connects), speaking HTTP/2 when http2 is set, as istiod's cluster for a
// gRPC Service port does.
func staticCluster(name string, port int, http2 bool) map[string]any {
	c := map[string]any{
		"name":            name,
		"type":            "STATIC",
		"connect_timeout": "1s",
		"load_assignment": map[string]any{
			"cluster_name": name,
			"endpoints": []any{map[string]any{"lb_endpoints": []any{
				map[string]any{"endpoint": map[string]any{"address": socketAddress(port)}},
			}}},
		},
	}
	if http2 {
		c["typed_extension_protocol_options"] = map[string]any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
			},
		}
	}
	return c
}

// serviceClusters are istiod's outbound clusters for every port of the
// Services: outbound|PORT||NAME.NAMESPACE.svc.cluster.local, HTTP/2 where
// the port is named or declared grpc/http2 (Istio's protocol selection).
func serviceClusters(services []*corev1.Service) []any {
	var out []any
	for _, s := range services {
		for _, p := range s.Spec.Ports {
			name := fmt.Sprintf("outbound|%d||%s.%s.svc.cluster.local", p.Port, s.Name, s.Namespace)
			proto := p.Name
			if p.AppProtocol != nil {
				proto = *p.AppProtocol
			}
			h2 := strings.HasPrefix(proto, "grpc") || strings.HasPrefix(proto, "http2")
			out = append(out, staticCluster(name, int(p.Port), h2))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].(map[string]any)["name"].(string) < out[j].(map[string]any)["name"].(string)
	})
	return out
}

// bootstrap is a bootstrap with an admin interface on loopback.
func bootstrap(listeners, clusters []any) map[string]any {
	return map[string]any{
		"admin":            map[string]any{"address": socketAddress(0)},
		"static_resources": map[string]any{"listeners": listeners, "clusters": clusters},
	}
}

// sidecarBootstrap models a workload's istio-proxy as istiod configures
// it: the inbound listener (a filter chain for the workload's port, whose
// route configuration has one catch-all route to the inbound cluster) and
// an outbound listener for the httpbin Service, plus the outbound clusters
// of the Services.
func sidecarBootstrap(services []*corev1.Service) map[string]any {
	inboundCluster := fmt.Sprintf("inbound|%d||", workloadPort)
	inbound := map[string]any{
		"name":              "virtualInbound",
		"address":           socketAddress(15006),
		"traffic_direction": "INBOUND",
		"filter_chains": []any{map[string]any{
			"name":               fmt.Sprintf("0.0.0.0_%d", workloadPort),
			"filter_chain_match": map[string]any{"destination_port": workloadPort},
			"filters": []any{connectionManager(fmt.Sprintf("inbound_0.0.0.0_%d", workloadPort), map[string]any{
				"name": inboundCluster,
				"virtual_hosts": []any{map[string]any{
					"name":    fmt.Sprintf("inbound|http|%d", workloadPort),
					"domains": []any{"*"},
					"routes":  []any{route("default", map[string]any{"prefix": "/"}, inboundCluster)},
				}},
			})},
		}},
	}
	outbound := map[string]any{
		"name":              "0.0.0.0_8000",
		"address":           socketAddress(8000),
		"traffic_direction": "OUTBOUND",
		"filter_chains": []any{map[string]any{
			"filters": []any{connectionManager("outbound_0.0.0.0_8000", map[string]any{
				"name": "8000",
				"virtual_hosts": []any{map[string]any{
					"name":    "httpbin.default.svc.cluster.local:8000",
					"domains": []any{"httpbin.default.svc.cluster.local", "httpbin"},
					"routes":  []any{route("default", map[string]any{"prefix": "/"}, httpbinCluster)},
				}},
			})},
		}},
	}
	clusters := append([]any{staticCluster(inboundCluster, workloadPort, false), staticCluster(httpbinCluster, 8000, false)}, serviceClusters(services)...)
	return bootstrap([]any{inbound, outbound}, clusters)
}

// gatewayBootstrap models an ingress gateway: the listener of its HTTP
// port, whose route configuration holds the virtual host edge.example.com,
// plus the outbound clusters of the Services. An istioctl or Helm gateway
// (pods selected by label) listens on 8080 (route configuration http.8080)
// and routes as docs/deploying.md's VirtualService says: a route named
// login for /api/login, then a catch-all. A Gateway API gateway (an
// EnvoyFilter's targetRefs) listens on the Gateway's port 80 (http.80), and
// istiod names each route after its HTTPRoute rule (namespace.name.index:
// components/gateway-api's HTTPRoute default/edge has one rule), so no
// route is named login there.
func gatewayBootstrap(services []*corev1.Service, gatewayAPI bool) map[string]any {
	port := 8080
	routes := []any{
		route("login", map[string]any{"safe_regex": map[string]any{"regex": "/api/login(/.*)?"}}, httpbinCluster),
		route("default", map[string]any{"prefix": "/"}, httpbinCluster),
	}
	if gatewayAPI {
		port = 80
		routes = []any{route("default.edge.0", map[string]any{"prefix": "/"}, httpbinCluster)}
	}
	l := map[string]any{
		"name":    fmt.Sprintf("0.0.0.0_%d", port),
		"address": socketAddress(port),
		"filter_chains": []any{map[string]any{
			"filters": []any{connectionManager(fmt.Sprintf("outbound_0.0.0.0_%d", port), map[string]any{
				"name": fmt.Sprintf("http.%d", port),
				"virtual_hosts": []any{map[string]any{
					"name":    "edge.example.com:80",
					"domains": []any{"edge.example.com", "edge.example.com:*"},
					"routes":  routes,
				}},
			})},
		}},
	}
	clusters := append([]any{staticCluster(httpbinCluster, 8000, false)}, serviceClusters(services)...)
	return bootstrap([]any{l}, clusters)
}

// proxyBootstrap returns the minimal bootstrap of the proxy kind p that
// the EnvoyFilter f patches.
func proxyBootstrap(p istiopatch.Proxy, f istiopatch.Filter, services []*corev1.Service) map[string]any {
	if p == istiopatch.Gateway {
		return gatewayBootstrap(services, len(f.Spec.GetTargetRefs()) > 0)
	}
	return sidecarBootstrap(services)
}

// toYAML renders a JSON-shaped bootstrap as YAML for Envoy (and for
// readable failure messages).
func toYAML(b map[string]any) ([]byte, error) {
	js, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(js)
}
