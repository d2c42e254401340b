package istio

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

const (
	rateLimitFilter = "envoy.filters.http.ratelimit"
	routerFilter    = "envoy.filters.http.router"
)

// proxySpec is a workload whose Envoy connects to istiod: what a pod's
// pilot-agent would tell istiod about it in the node metadata.
type proxySpec struct {
	// Gateway makes it a router (an ingress gateway), else a sidecar.
	Gateway   bool
	Name      string
	Namespace string
	Labels    map[string]string
	// IstioVersion is the ISTIO_VERSION it announces; "" is istioRelease.
	IstioVersion string
}

func (p proxySpec) String() string {
	kind := "sidecar"
	if p.Gateway {
		kind = "gateway"
	}
	return fmt.Sprintf("%s %s/%s (labels %v)", kind, p.Namespace, p.Name, p.Labels)
}

// ID is the node id istiod parses: TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local.
func (p proxySpec) ID() string {
	typ := "sidecar"
	if p.Gateway {
		typ = "router"
	}
	return fmt.Sprintf("%s~127.0.0.1~%s.%s~%s.svc.cluster.local", typ, p.Name, p.Namespace, p.Namespace)
}

// bootstrap is the Envoy bootstrap: an ADS cluster to istiod (delta xDS,
// as istio-proxy's), the node istiod expects, an admin port. Labels go in
// both LABELS and STATIC_LABELS: a gateway and a ServiceEntry endpoint on
// the same 127.0.0.1 make istiod replace LABELS with the endpoint's.
func (p proxySpec) bootstrap(xdsAddr string) ([]byte, error) {
	host, port, ok := strings.Cut(xdsAddr, ":")
	if !ok {
		return nil, fmt.Errorf("istio: xDS address %q has no port", xdsAddr)
	}
	version := p.IstioVersion
	if version == "" {
		version = istioRelease
	}
	meta := map[string]any{
		"ISTIO_VERSION":     version,
		"CLUSTER_ID":        clusterID,
		"NAMESPACE":         p.Namespace,
		"NAME":              p.Name,
		"WORKLOAD_NAME":     p.Name,
		"LABELS":            p.Labels,
		"STATIC_LABELS":     p.Labels,
		"INSTANCE_IPS":      "127.0.0.1",
		"INTERCEPTION_MODE": "NONE",
		"MESH_ID":           "cluster.local",
		"SERVICE_ACCOUNT":   "default",
	}
	b := map[string]any{
		"node": map[string]any{
			"id":       p.ID(),
			"cluster":  p.Name + "." + p.Namespace,
			"metadata": meta,
		},
		"admin": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}},
		"dynamic_resources": map[string]any{
			"ads_config": map[string]any{
				"api_type": "DELTA_GRPC", "transport_api_version": "V3",
				"grpc_services": []any{map[string]any{"envoy_grpc": map[string]any{"cluster_name": "xds-grpc"}}},
			},
			"cds_config": map[string]any{"ads": map[string]any{}, "resource_api_version": "V3"},
			"lds_config": map[string]any{"ads": map[string]any{}, "resource_api_version": "V3"},
		},
		"static_resources": map[string]any{"clusters": []any{map[string]any{
			"name": "xds-grpc", "type": "STATIC", "connect_timeout": "1s",
			"typed_extension_protocol_options": map[string]any{
				"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
					"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
					"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
				},
			},
			"load_assignment": map[string]any{"cluster_name": "xds-grpc", "endpoints": []any{map[string]any{"lb_endpoints": []any{map[string]any{
				"endpoint": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": host, "port_value": json.Number(port)}}},
			}}}}},
		}}},
	}
	return json.Marshal(b)
}

// proxy is a running Envoy connected to istiod.
type proxy struct {
	Spec  proxySpec
	Envoy *envoytest.Envoy
}

func startProxy(t *testing.T, d *istiod, p proxySpec) *proxy {
	t.Helper()
	b, err := p.bootstrap(d.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	e := envoytest.Start(t, b, envoytest.Options{Name: p.Name, LogLevel: "warning"})
	return &proxy{Spec: p, Envoy: e}
}

// configDump returns Envoy's /config_dump (with EDS) as generic JSON.
func (p *proxy) configDump() (any, error) {
	resp, err := http.Get(p.Envoy.AdminURL + "/config_dump?include_eds")
	if err != nil {
		return nil, fmt.Errorf("%v: config_dump: %w", p.Spec, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%v: config_dump: %w", p.Spec, err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%v: config_dump: %w", p.Spec, err)
	}
	return v, nil
}

// dumpFacts is what the checks read in a config dump.
type dumpFacts struct {
	// chains are the HTTP filter names of every HTTP connection manager,
	// by the listener that holds it (dynamic listeners only).
	chains map[string][][]string
	// rateLimitFilters are the typed_config of every rate-limit filter.
	rateLimitFilters []map[string]any
	// rateLimits counts the rate_limits entries of virtual hosts and of
	// routes, in listeners (inline route configs) and in RDS.
	vhostRateLimits, routeRateLimits int
	// routeNames are the names of every route of every route config.
	routeNames []string
	// clusters are the names of the dynamic and static clusters.
	clusters []string
	// listeners are the names of the active dynamic listeners.
	listeners []string
}

func facts(dump any) dumpFacts {
	f := dumpFacts{chains: map[string][][]string{}}
	for _, c := range objects(dump, "configs") {
		switch c["@type"] {
		case "type.googleapis.com/envoy.admin.v3.ListenersConfigDump":
			for _, dl := range objects(c, "dynamic_listeners") {
				name, _ := dl["name"].(string)
				active, _ := dl["active_state"].(map[string]any)
				if active == nil {
					continue
				}
				f.listeners = append(f.listeners, name)
				walk(active, func(m map[string]any) {
					if hf, ok := m["http_filters"].([]any); ok {
						var names []string
						for _, h := range hf {
							hm, _ := h.(map[string]any)
							n, _ := hm["name"].(string)
							names = append(names, n)
							if n == rateLimitFilter {
								tc, _ := hm["typed_config"].(map[string]any)
								f.rateLimitFilters = append(f.rateLimitFilters, tc)
							}
						}
						f.chains[name] = append(f.chains[name], names)
					}
				})
				f.countRoutes(active)
			}
		case "type.googleapis.com/envoy.admin.v3.RoutesConfigDump":
			f.countRoutes(c)
		case "type.googleapis.com/envoy.admin.v3.ClustersConfigDump":
			for _, key := range []string{"static_clusters", "dynamic_active_clusters"} {
				for _, dc := range objects(c, key) {
					cl, _ := dc["cluster"].(map[string]any)
					n, _ := cl["name"].(string)
					f.clusters = append(f.clusters, n)
				}
			}
		}
	}
	return f
}

// countRoutes counts the rate_limits of every virtual host and route below
// v, and collects the route names.
func (f *dumpFacts) countRoutes(v any) {
	walk(v, func(m map[string]any) {
		vhs, ok := m["virtual_hosts"].([]any)
		if !ok {
			return
		}
		for _, vh := range vhs {
			vm, _ := vh.(map[string]any)
			rl, _ := vm["rate_limits"].([]any)
			f.vhostRateLimits += len(rl)
			for _, r := range objects(vm, "routes") {
				n, _ := r["name"].(string)
				f.routeNames = append(f.routeNames, n)
				ra, _ := r["route"].(map[string]any)
				rrl, _ := ra["rate_limits"].([]any)
				f.routeRateLimits += len(rrl)
			}
		}
	})
}

// rateLimitBeforeRouter checks that every HTTP connection manager of the
// named listener kinds that has the rate-limit filter has it right before
// the router, which is last, and that at least one has it.
func (f dumpFacts) rateLimitBeforeRouter(listenerWanted func(string) bool) error {
	found := 0
	for l, chains := range f.chains {
		if !listenerWanted(l) {
			continue
		}
		for _, names := range chains {
			i := slices.Index(names, rateLimitFilter)
			if i < 0 {
				continue
			}
			found++
			if i != len(names)-2 || names[len(names)-1] != routerFilter {
				return fmt.Errorf("listener %s: HTTP filters %v: want %s right before %s, last", l, names, rateLimitFilter, routerFilter)
			}
		}
	}
	if found == 0 {
		var all []string
		for l, chains := range f.chains {
			all = append(all, fmt.Sprintf("%s %v", l, chains))
		}
		slices.Sort(all)
		return fmt.Errorf("no HTTP filter chain holds %s (listeners and their HTTP filters: %s)", rateLimitFilter, strings.Join(all, "; "))
	}
	return nil
}

// objects returns the objects of the list m[key].
func objects(v any, key string) []map[string]any {
	m, _ := v.(map[string]any)
	items, _ := m[key].([]any)
	var out []map[string]any
	for _, e := range items {
		if o, ok := e.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

// walk calls fn on every object in v, depth first.
func walk(v any, fn func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		fn(x)
		for _, e := range x {
			walk(e, fn)
		}
	case []any:
		for _, e := range x {
			walk(e, fn)
		}
	}
}
