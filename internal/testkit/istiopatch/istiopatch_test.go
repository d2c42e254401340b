package istiopatch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"sigs.k8s.io/yaml"
)

func fromYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMerge(t *testing.T) {
	vhost := (&routev3.VirtualHost{}).ProtoReflect().Descriptor()
	routeDesc := (&routev3.Route{}).ProtoReflect().Descriptor()
	tests := []struct {
		name            string
		dst, src, want  string
		routeNotVirtual bool
	}{
		{
			name: "a repeated field appends",
			dst:  "{name: a, rate_limits: [{actions: [{remote_address: {}}]}]}",
			src:  "{rate_limits: [{actions: [{generic_key: {descriptor_value: x}}]}]}",
			want: "{name: a, rate_limits: [{actions: [{remote_address: {}}]}, {actions: [{generic_key: {descriptor_value: x}}]}]}",
		},
		{
			name: "the camelCase spelling merges into the snake_case field",
			dst:  "{rate_limits: [{actions: [{remote_address: {}}]}]}",
			src:  "{rateLimits: [{actions: [{generic_key: {descriptor_value: x}}]}]}",
			want: "{rate_limits: [{actions: [{remote_address: {}}]}, {actions: [{generic_key: {descriptor_value: x}}]}]}",
		},
		{
			name: "a map entry is replaced, not merged; other entries stay",
			dst:  "{typed_per_filter_config: {a: {'@type': t/A, x: 1}, b: {'@type': t/B}}}",
			src:  "{typed_per_filter_config: {a: {'@type': t/A, y: 2}}}",
			want: "{typed_per_filter_config: {a: {'@type': t/A, y: 2}, b: {'@type': t/B}}}",
		},
		{
			name: "a proto3 scalar at its zero value changes nothing",
			dst:  "{name: a, include_request_attempt_count: true}",
			src:  "{name: '', include_request_attempt_count: false}",
			want: "{name: a, include_request_attempt_count: true}",
		},
		{
			name: "a set scalar replaces",
			dst:  "{name: a}",
			src:  "{name: b}",
			want: "{name: b}",
		},
		{
			name: "an unknown key passes through for Envoy to judge",
			dst:  "{name: a}",
			src:  "{rate_limitz: [1]}",
			want: "{name: a, rate_limitz: [1]}",
		},
		{
			name:            "a nested message merges field by field",
			routeNotVirtual: true,
			dst:             "{name: r, route: {cluster: c, timeout: 1s}}",
			src:             "{route: {rate_limits: [{actions: [{remote_address: {}}]}], timeout: 2s}}",
			want:            "{name: r, route: {cluster: c, timeout: 2s, rate_limits: [{actions: [{remote_address: {}}]}]}}",
		},
		{
			name:            "setting one member of a oneof clears the others",
			routeNotVirtual: true,
			dst:             "{name: r, route: {cluster: c}}",
			src:             "{direct_response: {status: 200}}",
			want:            "{name: r, direct_response: {status: 200}}",
		},
		{
			name:            "a JSON null sets nothing",
			routeNotVirtual: true,
			dst:             "{name: r, route: {cluster: c}}",
			src:             "{route: null}",
			want:            "{name: r, route: {cluster: c}}",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst, src, want := fromYAML(t, tc.dst), fromYAML(t, tc.src), fromYAML(t, tc.want)
			desc := vhost
			if tc.routeNotVirtual {
				desc = routeDesc
			}
			if err := Merge(dst, src, desc); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(dst, want) {
				t.Fatalf("merged\n got %v\nwant %v", dst, want)
			}
		})
	}
}

// listenerYAML is a listener whose connection manager has the HTTP
// filters [cors, router] and one virtual host with one route.
func listenerYAML(name, direction string, port int, routeConfig, vhost, action string) string {
	return fmt.Sprintf(`
  - name: %s
    traffic_direction: %s
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          route_config:
            name: %q
            virtual_hosts:
            - name: %s
              routes: [{name: default, match: {prefix: /}, %s}]
          http_filters: [{name: cors}, {name: envoy.filters.http.router}]`, name, direction, port, routeConfig, vhost, action)
}

// proxy has an inbound listener routing to a cluster and an outbound one
// answering directly.
var proxy = "static_resources:\n  listeners:" +
	listenerYAML("in", "INBOUND", 15006, "inbound|8080||", "inbound|http|8080", "route: {cluster: x}") +
	listenerYAML("out", "OUTBOUND", 8000, "8000", "svc:8000", "direct_response: {status: 200}") + `
  clusters: [{name: "inbound|8080||"}, {name: "outbound|8081||rls.ns.svc.cluster.local"}]
`

func filter(t *testing.T, name, spec string) Filter {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseSpec(name, js)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// httpFilters lists the HTTP filter names of each listener, by name.
func httpFilters(b map[string]any) map[string]string {
	out := map[string]string{}
	for _, l := range listeners(b) {
		connectionManagers(l, func(_, _, hcm map[string]any) {
			var names []string
			for _, h := range objects(hcm["http_filters"]) {
				names = append(names, str(h["name"]))
			}
			out[str(l["name"])] = strings.Join(names, ",")
		})
	}
	return out
}

func TestApplyHTTPFilters(t *testing.T) {
	const insert = `
configPatches:
- applyTo: HTTP_FILTER
  match:
    context: %s
    listener:
      filterChain:
        filter:
          name: envoy.filters.network.http_connection_manager
          %s
  patch: {operation: %s, value: {name: rl}}
`
	sub := "subFilter: {name: envoy.filters.http.router}"
	tests := []struct {
		name, ctx, sub, op string
		proxy              Proxy
		want               map[string]string
		count              int
	}{
		{"before the router, inbound only", "SIDECAR_INBOUND", sub, "INSERT_BEFORE", Sidecar,
			map[string]string{"in": "cors,rl,envoy.filters.http.router", "out": "cors,envoy.filters.http.router"}, 1},
		{"outbound only", "SIDECAR_OUTBOUND", sub, "INSERT_BEFORE", Sidecar,
			map[string]string{"in": "cors,envoy.filters.http.router", "out": "cors,rl,envoy.filters.http.router"}, 1},
		{"ANY: both sides", "ANY", sub, "INSERT_AFTER", Sidecar,
			map[string]string{"in": "cors,envoy.filters.http.router,rl", "out": "cors,envoy.filters.http.router,rl"}, 2},
		{"a gateway: every listener", "GATEWAY", sub, "INSERT_BEFORE", Gateway,
			map[string]string{"in": "cors,rl,envoy.filters.http.router", "out": "cors,rl,envoy.filters.http.router"}, 2},
		{"BEFORE without a subFilter is FIRST", "SIDECAR_INBOUND", "", "INSERT_BEFORE", Sidecar,
			map[string]string{"in": "rl,cors,envoy.filters.http.router", "out": "cors,envoy.filters.http.router"}, 1},
		{"AFTER without a subFilter is ADD", "SIDECAR_INBOUND", "", "INSERT_AFTER", Sidecar,
			map[string]string{"in": "cors,envoy.filters.http.router,rl", "out": "cors,envoy.filters.http.router"}, 1},
		{"a subFilter that is not there changes nothing", "SIDECAR_INBOUND", "subFilter: {name: nope}", "INSERT_BEFORE", Sidecar,
			map[string]string{"in": "cors,envoy.filters.http.router", "out": "cors,envoy.filters.http.router"}, 0},
		{"REMOVE", "SIDECAR_INBOUND", "subFilter: {name: cors}", "REMOVE", Sidecar,
			map[string]string{"in": "envoy.filters.http.router", "out": "cors,envoy.filters.http.router"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := fromYAML(t, proxy)
			spec := strings.Replace(strings.Replace(strings.Replace(insert, "%s", tc.ctx, 1), "%s", tc.sub, 1), "%s", tc.op, 1)
			if tc.op == "REMOVE" {
				spec = strings.Replace(spec, ", value: {name: rl}", "", 1)
			}
			applied, err := Apply(b, tc.proxy, filter(t, "f", spec))
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != 1 || applied[0].Count != tc.count {
				t.Fatalf("applied %+v, want one patch changing %d", applied, tc.count)
			}
			if got := httpFilters(b); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("filters %v, want %v", got, tc.want)
			}
		})
	}
}

func TestApplyContextsAndRoutes(t *testing.T) {
	b := fromYAML(t, proxy)
	f := filter(t, "f", `
priority: 10
configPatches:
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_INBOUND, routeConfiguration: {vhost: {route: {action: ROUTE}}}}
  patch: {operation: MERGE, value: {route: {rate_limits: [{actions: [{remote_address: {}}]}]}}}
- applyTo: HTTP_ROUTE
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {route: {action: ROUTE}}}}
  patch: {operation: MERGE, value: {route: {rate_limits: [{actions: [{remote_address: {}}]}]}}}
- applyTo: VIRTUAL_HOST
  match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 8000}}
  patch: {operation: MERGE, value: {rate_limits: [{actions: [{remote_address: {}}]}]}}
- applyTo: CLUSTER
  match: {context: SIDECAR_OUTBOUND}
  patch: {operation: ADD, value: {name: added}}
- applyTo: HTTP_FILTER
  match: {context: GATEWAY}
  patch: {operation: ADD, value: {name: gw}}
`)
	applied, err := Apply(b, Sidecar, f)
	if err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, a := range applied {
		counts = append(counts, a.Count)
	}
	// The GATEWAY patch does not fit a sidecar; the outbound route is a
	// direct response, which action ROUTE does not select.
	if want := []int{1, 0, 1, 1}; !reflect.DeepEqual(counts, want) {
		t.Fatalf("counts %v, want %v (%+v)", counts, want, applied)
	}
	if n := len(objects(path(b, "static_resources", "clusters"))); n != 3 {
		t.Fatalf("%d clusters, want 3 with the added one", n)
	}
}

func TestApplyRefusesWhatItDoesNotModel(t *testing.T) {
	for _, tc := range []struct{ name, spec, want string }{
		{"an SNI match", `{configPatches: [{applyTo: HTTP_FILTER, match: {context: ANY, listener: {filterChain: {sni: a.example}}}, patch: {operation: ADD, value: {name: x}}}]}`, "sni"},
		{"MERGE of an HTTP filter", `{configPatches: [{applyTo: HTTP_FILTER, match: {context: ANY}, patch: {operation: MERGE, value: {name: x}}}]}`, "MERGE on HTTP_FILTER is not modelled"},
		{"a listener patch", `{configPatches: [{applyTo: LISTENER, match: {context: ANY}, patch: {operation: ADD, value: {name: x}}}]}`, "applyTo LISTENER is not modelled"},
		{"a gateway name match", `{configPatches: [{applyTo: VIRTUAL_HOST, match: {context: ANY, routeConfiguration: {gateway: ns/gw}}, patch: {operation: MERGE, value: {name: x}}}]}`, "gateway"},
		{"no value", `{configPatches: [{applyTo: CLUSTER, match: {context: ANY}, patch: {operation: ADD}}]}`, "patch.value is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Apply(fromYAML(t, proxy), Sidecar, filter(t, "f", tc.spec))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestApplyOrdersByPriority(t *testing.T) {
	b := fromYAML(t, proxy)
	patch := func(name string, prio int) Filter {
		return filter(t, name, `{priority: `+string(rune('0'+prio))+`, configPatches: [{applyTo: HTTP_FILTER, match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {subFilter: {name: envoy.filters.http.router}}}}}, patch: {operation: INSERT_BEFORE, value: {name: `+name+`}}}]}`)
	}
	// Given late-first, applied by priority: 0's filter is inserted before
	// the router first, and 5's after it, right before the router.
	if _, err := Apply(b, Sidecar, patch("late", 5), patch("early", 0)); err != nil {
		t.Fatal(err)
	}
	if got, want := httpFilters(b)["in"], "cors,early,late,envoy.filters.http.router"; got != want {
		t.Fatalf("inbound filters %s, want %s", got, want)
	}
}
