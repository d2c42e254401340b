// Package istiopatch applies the config patches of Istio EnvoyFilters to
// an Envoy bootstrap, the way istiod applies them to the configuration it
// generates for a proxy, so that a real Envoy can run the result.
//
// It is a model of istiod, kept only where the real one is not used yet:
// test/envoy/e2e's TestNoPathBypassAtTheGateway builds its gateway with it.
// The shipped EnvoyFilters themselves are judged by a real istiod
// (test/istio), which also knows what this model cannot: where a patch's
// context, vhost name, selector or proxyVersion makes it land. Move that
// test onto test/istio's harness and delete this package.
//
// The bootstrap and the patch values stay JSON-shaped maps (what YAML or a
// google.protobuf.Struct decodes to): every field a patch writes reaches
// Envoy as written, so Envoy, not a Go decoder, accepts or refuses it.
// MERGE follows istiod's proto merge (istio's pkg/proto/merge), guided by
// the Envoy descriptors of go-control-plane: a message merges field by
// field, a repeated field appends, a map replaces entry by entry, a
// google.protobuf.Any or Duration is replaced whole, setting one member of
// a oneof clears the others, and a proto3 scalar left at its zero value
// changes nothing.
//
// The proxy is modelled on the names istiod gives things: on a sidecar a
// listener's traffic_direction (INBOUND, OUTBOUND) says which side it is
// and a cluster named inbound|… is the inbound side; on a gateway every
// listener, route configuration and cluster is GATEWAY. Match fields this
// package does not model (SNI, transport protocol, port names, …) are an
// error, never ignored, so a patch cannot silently land nowhere or
// everywhere.
//
// It works on values its caller hands it: it must not read files, run
// Envoy or know the repository's layout.
package istiopatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
)

// Proxy is the kind of proxy a bootstrap stands for.
type Proxy int

const (
	// Sidecar is a workload's istio-proxy: SIDECAR_INBOUND and
	// SIDECAR_OUTBOUND patches apply.
	Sidecar Proxy = iota + 1
	// Gateway is an ingress gateway (router mode): GATEWAY patches apply.
	Gateway
)

func (p Proxy) String() string {
	switch p {
	case Sidecar:
		return "sidecar"
	case Gateway:
		return "gateway"
	}
	return "proxy(" + strconv.Itoa(int(p)) + ")"
}

// Filter is one EnvoyFilter: its name for messages and its spec.
type Filter struct {
	Name string
	Spec *networking.EnvoyFilter
}

// ParseSpec decodes an EnvoyFilter's spec (JSON) strictly into Istio's API
// type; the patch values stay as written inside it.
func ParseSpec(name string, specJSON []byte) (Filter, error) {
	var spec networking.EnvoyFilter
	if err := protojson.Unmarshal(specJSON, &spec); err != nil {
		return Filter{}, fmt.Errorf("istiopatch: EnvoyFilter %s: spec: %w", name, err)
	}
	return Filter{Name: name, Spec: &spec}, nil
}

// Applied counts, for one patch, the places it changed.
type Applied struct {
	// Where names the patch: EnvoyFilter name, index and applyTo.
	Where string
	// Context is the patch's match.context.
	Context networking.EnvoyFilter_PatchContext
	// Count is how many objects the patch changed (or added).
	Count int
}

// Apply patches bootstrap, in place, with every config patch of filters
// whose context fits proxy, in Istio's order (priority, then the order
// given), and returns one Applied per patch that fits proxy. It fails on a
// patch it cannot apply as istiod would: an operation or a match field it
// does not model, or a value of the wrong shape.
func Apply(bootstrap map[string]any, proxy Proxy, filters ...Filter) ([]Applied, error) {
	ordered := slices.Clone(filters)
	slices.SortStableFunc(ordered, func(a, b Filter) int {
		return int(a.Spec.GetPriority()) - int(b.Spec.GetPriority())
	})
	var out []Applied
	var errs []error
	for _, f := range ordered {
		for i, cp := range f.Spec.GetConfigPatches() {
			where := fmt.Sprintf("EnvoyFilter %s: configPatches[%d] (%v %v)", f.Name, i, cp.GetApplyTo(), cp.GetPatch().GetOperation())
			ctx := cp.GetMatch().GetContext()
			if !fits(proxy, ctx) {
				continue
			}
			n, err := applyOne(bootstrap, proxy, cp)
			if err != nil {
				errs = append(errs, fmt.Errorf("istiopatch: %s: %w", where, err))
				continue
			}
			out = append(out, Applied{Where: where, Context: ctx, Count: n})
		}
	}
	return out, errors.Join(errs...)
}

// fits reports whether a patch of context ctx may apply to proxy at all.
func fits(proxy Proxy, ctx networking.EnvoyFilter_PatchContext) bool {
	switch ctx {
	case networking.EnvoyFilter_ANY:
		return true
	case networking.EnvoyFilter_GATEWAY:
		return proxy == Gateway
	case networking.EnvoyFilter_SIDECAR_INBOUND, networking.EnvoyFilter_SIDECAR_OUTBOUND:
		return proxy == Sidecar
	}
	return false
}

// side is the context of one listener or cluster of the proxy.
func side(proxy Proxy, inbound bool) networking.EnvoyFilter_PatchContext {
	switch {
	case proxy == Gateway:
		return networking.EnvoyFilter_GATEWAY
	case inbound:
		return networking.EnvoyFilter_SIDECAR_INBOUND
	}
	return networking.EnvoyFilter_SIDECAR_OUTBOUND
}

func contextMatches(want, have networking.EnvoyFilter_PatchContext) bool {
	return want == networking.EnvoyFilter_ANY || want == have
}

func applyOne(b map[string]any, proxy Proxy, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) (int, error) {
	op := cp.GetPatch().GetOperation()
	var value map[string]any
	if v := cp.GetPatch().GetValue(); v != nil {
		value = v.AsMap()
	}
	if value == nil && op != networking.EnvoyFilter_Patch_REMOVE {
		return 0, fmt.Errorf("patch.value is required for %v", op)
	}
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_HTTP_FILTER:
		return patchHTTPFilters(b, proxy, cp, value)
	case networking.EnvoyFilter_CLUSTER:
		return patchClusters(b, proxy, cp, value)
	case networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE:
		return patchRoutes(b, proxy, cp, value)
	}
	return 0, fmt.Errorf("applyTo %v is not modelled", cp.GetApplyTo())
}

// listeners returns the bootstrap's static listeners.
func listeners(b map[string]any) []map[string]any {
	return objects(path(b, "static_resources", "listeners"))
}

// connectionManagers calls fn for every http_connection_manager config of
// the listener (its typed_config, whose route_config is inline).
func connectionManagers(l map[string]any, fn func(chain, filter, hcm map[string]any)) {
	for _, chain := range objects(l["filter_chains"]) {
		for _, f := range objects(chain["filters"]) {
			if hcm, ok := f["typed_config"].(map[string]any); ok && strings.HasSuffix(str(hcm["@type"]), ".HttpConnectionManager") {
				fn(chain, f, hcm)
			}
		}
	}
}

func listenerContext(proxy Proxy, l map[string]any) networking.EnvoyFilter_PatchContext {
	return side(proxy, str(l["traffic_direction"]) == "INBOUND")
}

// listenerMatches checks the listener-level fields of a ListenerMatch.
func listenerMatches(lm *networking.EnvoyFilter_ListenerMatch, l map[string]any) (bool, error) {
	if lm.GetPortName() != "" || lm.GetListenerFilter() != "" {
		return false, errors.New("match.listener.portName and listenerFilter are not modelled")
	}
	fc := lm.GetFilterChain()
	if fc.GetSni() != "" || fc.GetTransportProtocol() != "" || fc.GetApplicationProtocols() != "" || fc.GetTransportSocket() != "" {
		return false, errors.New("match.listener.filterChain sni, transportProtocol, applicationProtocols and transportSocket are not modelled")
	}
	if lm.GetName() != "" && lm.GetName() != str(l["name"]) {
		return false, nil
	}
	if p := lm.GetPortNumber(); p != 0 && p != uint32(num(path(l, "address", "socket_address", "port_value"))) {
		return false, nil
	}
	return true, nil
}

// chainMatches checks a filter chain against the FilterChainMatch's name
// and destination port.
func chainMatches(fc *networking.EnvoyFilter_ListenerMatch_FilterChainMatch, chain map[string]any) bool {
	if fc.GetName() != "" && fc.GetName() != str(chain["name"]) {
		return false
	}
	if p := fc.GetDestinationPort(); p != 0 && p != uint32(num(path(chain, "filter_chain_match", "destination_port"))) {
		return false
	}
	return true
}

// patchHTTPFilters applies an HTTP_FILTER patch to the http_filters of
// every matching connection manager, as istiod's listener patcher does: ADD
// appends, INSERT_FIRST prepends, INSERT_BEFORE and INSERT_AFTER place the
// value next to the matching subFilter (without a subFilter, BEFORE is
// FIRST and AFTER is ADD), REMOVE drops the matching filters.
func patchHTTPFilters(b map[string]any, proxy Proxy, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, value map[string]any) (int, error) {
	lm := cp.GetMatch().GetListener()
	op := cp.GetPatch().GetOperation()
	switch op {
	case networking.EnvoyFilter_Patch_ADD, networking.EnvoyFilter_Patch_INSERT_FIRST,
		networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER,
		networking.EnvoyFilter_Patch_REMOVE:
	default:
		return 0, fmt.Errorf("operation %v on HTTP_FILTER is not modelled", op)
	}
	netFilter := lm.GetFilterChain().GetFilter().GetName()
	sub := lm.GetFilterChain().GetFilter().GetSubFilter().GetName()
	if op == networking.EnvoyFilter_Patch_REMOVE && sub == "" {
		return 0, errors.New("REMOVE of an HTTP_FILTER needs match.listener.filterChain.filter.subFilter.name")
	}
	count := 0
	for _, l := range listeners(b) {
		if !contextMatches(cp.GetMatch().GetContext(), listenerContext(proxy, l)) {
			continue
		}
		ok, err := listenerMatches(lm, l)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		connectionManagers(l, func(chain, f, hcm map[string]any) {
			if !chainMatches(lm.GetFilterChain(), chain) || (netFilter != "" && netFilter != str(f["name"])) {
				return
			}
			filters := objects(hcm["http_filters"])
			at := slices.IndexFunc(filters, func(h map[string]any) bool { return str(h["name"]) == sub })
			var next []map[string]any
			switch {
			case op == networking.EnvoyFilter_Patch_ADD,
				op == networking.EnvoyFilter_Patch_INSERT_AFTER && sub == "":
				next = append(filters, clone(value))
			case op == networking.EnvoyFilter_Patch_INSERT_FIRST,
				op == networking.EnvoyFilter_Patch_INSERT_BEFORE && sub == "":
				next = append([]map[string]any{clone(value)}, filters...)
			case at < 0:
				return
			case op == networking.EnvoyFilter_Patch_INSERT_BEFORE:
				next = slices.Insert(filters, at, clone(value))
			case op == networking.EnvoyFilter_Patch_INSERT_AFTER:
				next = slices.Insert(filters, at+1, clone(value))
			case op == networking.EnvoyFilter_Patch_REMOVE:
				next = slices.DeleteFunc(filters, func(h map[string]any) bool { return str(h["name"]) == sub })
			}
			hcm["http_filters"] = anys(next)
			count++
		})
	}
	return count, nil
}

// istioClusterName splits istiod's cluster name direction|port|subset|host.
func istioClusterName(name string) (direction string, port uint32, subset, host string) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return "", 0, "", ""
	}
	p, _ := strconv.ParseUint(parts[1], 10, 32)
	return parts[0], uint32(p), parts[2], parts[3]
}

// patchClusters applies a CLUSTER patch: ADD appends the value to the
// static clusters once, MERGE merges it into and REMOVE drops the matching
// clusters.
func patchClusters(b map[string]any, proxy Proxy, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, value map[string]any) (int, error) {
	sr, _ := b["static_resources"].(map[string]any)
	if sr == nil {
		return 0, errors.New("the bootstrap has no static_resources")
	}
	clusters := objects(sr["clusters"])
	cm := cp.GetMatch().GetCluster()
	switch op := cp.GetPatch().GetOperation(); op {
	case networking.EnvoyFilter_Patch_ADD:
		sr["clusters"] = anys(append(clusters, clone(value)))
		return 1, nil
	case networking.EnvoyFilter_Patch_MERGE, networking.EnvoyFilter_Patch_REMOVE:
		count := 0
		var keep []map[string]any
		for _, c := range clusters {
			name := str(c["name"])
			dir, port, subset, host := istioClusterName(name)
			match := contextMatches(cp.GetMatch().GetContext(), side(proxy, dir == "inbound")) &&
				(cm.GetName() == "" || cm.GetName() == name) &&
				(cm.GetPortNumber() == 0 || cm.GetPortNumber() == port) &&
				(cm.GetService() == "" || cm.GetService() == host) &&
				(cm.GetSubset() == "" || cm.GetSubset() == subset)
			if match {
				count++
				if op == networking.EnvoyFilter_Patch_REMOVE {
					continue
				}
				if err := Merge(c, value, (&clusterv3.Cluster{}).ProtoReflect().Descriptor()); err != nil {
					return 0, err
				}
			}
			keep = append(keep, c)
		}
		sr["clusters"] = anys(keep)
		return count, nil
	default:
		return 0, fmt.Errorf("operation %v on CLUSTER is not modelled", op)
	}
}

// routeConfigPort is the port istiod's route configuration name stands
// for: "8080" and "http.8080" (a gateway's), or inbound|8080||.
func routeConfigPort(name string) uint32 {
	if dir, port, _, _ := istioClusterName(name); dir != "" {
		return port
	}
	p, _ := strconv.ParseUint(name[strings.LastIndex(name, ".")+1:], 10, 32)
	return uint32(p)
}

// routeActionMatches checks a route against RouteMatch.action.
func routeActionMatches(a networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_Action, route map[string]any) bool {
	switch a {
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ANY:
		return true
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE:
		return route["route"] != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_REDIRECT:
		return route["redirect"] != nil
	case networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_DIRECT_RESPONSE:
		return route["direct_response"] != nil
	}
	return false
}

// patchRoutes applies a VIRTUAL_HOST or HTTP_ROUTE patch to the inline
// route configurations of the matching connection managers: MERGE merges
// the value into each matching virtual host or route, REMOVE drops them,
// and ADD appends a virtual host to each matching route configuration.
func patchRoutes(b map[string]any, proxy Proxy, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, value map[string]any) (int, error) {
	rm := cp.GetMatch().GetRouteConfiguration()
	if rm.GetPortName() != "" || rm.GetGateway() != "" || rm.GetVhost().GetDomainName() != "" {
		return 0, errors.New("match.routeConfiguration portName, gateway and vhost.domainName are not modelled")
	}
	op := cp.GetPatch().GetOperation()
	vhostPatch := cp.GetApplyTo() == networking.EnvoyFilter_VIRTUAL_HOST
	switch {
	case op == networking.EnvoyFilter_Patch_MERGE, op == networking.EnvoyFilter_Patch_REMOVE,
		op == networking.EnvoyFilter_Patch_ADD && vhostPatch:
	default:
		return 0, fmt.Errorf("operation %v on %v is not modelled", op, cp.GetApplyTo())
	}
	desc := (&routev3.Route{}).ProtoReflect().Descriptor()
	if vhostPatch {
		desc = (&routev3.VirtualHost{}).ProtoReflect().Descriptor()
	}
	count := 0
	var errs []error
	for _, l := range listeners(b) {
		if !contextMatches(cp.GetMatch().GetContext(), listenerContext(proxy, l)) {
			continue
		}
		connectionManagers(l, func(_, _, hcm map[string]any) {
			rc, _ := hcm["route_config"].(map[string]any)
			if rc == nil {
				return
			}
			name := str(rc["name"])
			if (rm.GetName() != "" && rm.GetName() != name) || (rm.GetPortNumber() != 0 && rm.GetPortNumber() != routeConfigPort(name)) {
				return
			}
			vhosts := objects(rc["virtual_hosts"])
			if op == networking.EnvoyFilter_Patch_ADD {
				rc["virtual_hosts"] = anys(append(vhosts, clone(value)))
				count++
				return
			}
			var keepHosts []map[string]any
			for _, vh := range vhosts {
				if vm := rm.GetVhost(); vm.GetName() != "" && vm.GetName() != str(vh["name"]) {
					keepHosts = append(keepHosts, vh)
					continue
				}
				if vhostPatch {
					count++
					if op == networking.EnvoyFilter_Patch_REMOVE {
						continue
					}
					errs = append(errs, Merge(vh, value, desc))
					keepHosts = append(keepHosts, vh)
					continue
				}
				var keepRoutes []map[string]any
				for _, r := range objects(vh["routes"]) {
					m := rm.GetVhost().GetRoute()
					if (m.GetName() != "" && m.GetName() != str(r["name"])) || !routeActionMatches(m.GetAction(), r) {
						keepRoutes = append(keepRoutes, r)
						continue
					}
					count++
					if op == networking.EnvoyFilter_Patch_REMOVE {
						continue
					}
					errs = append(errs, Merge(r, value, desc))
					keepRoutes = append(keepRoutes, r)
				}
				vh["routes"] = anys(keepRoutes)
				keepHosts = append(keepHosts, vh)
			}
			rc["virtual_hosts"] = anys(keepHosts)
		})
	}
	return count, errors.Join(errs...)
}

// path walks nested maps by key; a missing step gives nil.
func path(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// objects returns the maps of a JSON list (other elements are skipped:
// Envoy will judge them).
func objects(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func anys(ms []map[string]any) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// num reads a JSON number (float64, json.Number or a string of digits).
func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case json.Number:
		f, _ := n.Float64()
		return f
	case string:
		f, _ := strconv.ParseFloat(n, 64)
		return f
	}
	return 0
}

// clone deep-copies a JSON-shaped map.
func clone(m map[string]any) map[string]any {
	c, _ := cloneValue(m).(map[string]any)
	return c
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = cloneValue(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}
