package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// envoyFilterDoc is a decoded Istio EnvoyFilter.
type envoyFilterDoc struct {
	where string
	meta  metav1.ObjectMeta
	spec  *networking.EnvoyFilter
	// hasPriority records whether spec.priority is written out: its zero
	// value is indistinguishable from "unset" after decoding.
	hasPriority bool
}

// decodeEnvoyFilter decodes an EnvoyFilter object: the envelope strictly
// into Kubernetes metadata, the spec with protojson into istio.io/api's
// EnvoyFilter (unknown fields and bad enum names fail).
func decodeEnvoyFilter(where string, doc []byte) (*envoyFilterDoc, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var env struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
		Spec            json.RawMessage   `json:"spec"`
	}
	strict, err := kjson.UnmarshalStrict(js, &env)
	if err != nil {
		return nil, fmt.Errorf("%s: EnvoyFilter: %w", where, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: EnvoyFilter: %w", where, errors.Join(strict...))
	}
	where = fmt.Sprintf("%s EnvoyFilter %s/%s", where, env.Metadata.Namespace, env.Metadata.Name)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(env.Spec, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("%s: spec must be a mapping", where)
	}
	var spec networking.EnvoyFilter
	if err := strictJSON.Unmarshal(env.Spec, &spec); err != nil {
		return nil, fmt.Errorf("%s: spec: %w", where, err)
	}
	_, hasPriority := fields["priority"]
	return &envoyFilterDoc{where: where, meta: env.Metadata, spec: &spec, hasPriority: hasPriority}, nil
}

// patchType returns an empty message of the Envoy type a patch value of
// applyTo must be, as Istio decodes it.
func patchType(applyTo networking.EnvoyFilter_ApplyTo) (proto.Message, error) {
	switch applyTo {
	case networking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}, nil
	case networking.EnvoyFilter_FILTER_CHAIN:
		return &listenerv3.FilterChain{}, nil
	case networking.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}, nil
	case networking.EnvoyFilter_HTTP_FILTER:
		return &hcmv3.HttpFilter{}, nil
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}, nil
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}, nil
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}, nil
	case networking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}, nil
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return &corev3.TypedExtensionConfig{}, nil
	case networking.EnvoyFilter_BOOTSTRAP:
		return &bootstrapv3.Bootstrap{}, nil
	case networking.EnvoyFilter_LISTENER_FILTER:
		return &listenerv3.ListenerFilter{}, nil
	}
	return nil, fmt.Errorf("applyTo %v has no Envoy type", applyTo)
}

// decodedPatch is one config patch with its value decoded.
type decodedPatch struct {
	where string
	cp    *networking.EnvoyFilter_EnvoyConfigObjectPatch
	value proto.Message
}

// decodePatches decodes and validates every patch value. A value that
// Istio adds or substitutes whole (ADD, INSERT_*, REPLACE) must be a valid
// message on its own; a MERGE value is partial by nature, so what it adds
// is validated piece by piece: every element of a repeated field and every
// map value (such as each route.v3.RateLimit), whole.
func decodePatches(ef *envoyFilterDoc) ([]decodedPatch, error) {
	var (
		out  []decodedPatch
		errs []error
	)
	for i, cp := range ef.spec.GetConfigPatches() {
		where := fmt.Sprintf("%s: configPatches[%d] (%v)", ef.where, i, cp.GetApplyTo())
		op := cp.GetPatch().GetOperation()
		if cp.GetPatch() == nil || op == networking.EnvoyFilter_Patch_INVALID {
			errs = append(errs, fmt.Errorf("%s: patch.operation is required", where))
			continue
		}
		if op == networking.EnvoyFilter_Patch_REMOVE {
			if cp.GetPatch().GetValue() != nil {
				errs = append(errs, fmt.Errorf("%s: REMOVE takes no value", where))
			}
			out = append(out, decodedPatch{where: where, cp: cp})
			continue
		}
		m, err := patchType(cp.GetApplyTo())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if cp.GetPatch().GetValue() == nil {
			errs = append(errs, fmt.Errorf("%s: patch.value is required for %v", where, op))
			continue
		}
		if err := unmarshalStruct(cp.GetPatch().GetValue(), m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		switch op {
		case networking.EnvoyFilter_Patch_MERGE, networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST:
			if err := validateMergePieces(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().Name())); err != nil {
				errs = append(errs, fmt.Errorf("%s: invalid MERGE value:\n%w", where, err))
				continue
			}
		default:
			if err := validateTree(m); err != nil {
				errs = append(errs, fmt.Errorf("%s: invalid %v value:\n%w", where, op, err))
				continue
			}
		}
		out = append(out, decodedPatch{where: where, cp: cp, value: m})
	}
	return out, errors.Join(errs...)
}

// validateMergePieces validates, whole, every element of a repeated message
// field and every message map value under m, descending through singular
// message fields (which a MERGE fills only partly).
func validateMergePieces(m protoreflect.Message, path string) error {
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				if err := validateTree(v.List().Get(i).Message().Interface()); err != nil {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", name, i, err))
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if err := validateTree(mv.Message().Interface()); err != nil {
					errs = append(errs, fmt.Errorf("%s[%q]: %w", name, k.String(), err))
				}
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			if err := validateMergePieces(v.Message(), name); err != nil {
				errs = append(errs, err)
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// istioProxy is what the simulator needs from the proxies an EnvoyFilter
// patches: the rate-limit filter it inserts and a virtual host as Istio
// generates it with the filter's route patches applied.
type istioProxy struct {
	where   string
	context networking.EnvoyFilter_PatchContext
	filter  *ratelimitv3.RateLimit
	vhosts  []*routev3.VirtualHost
}

// rlsClusterName is Istio's cluster name for a Service port.
var rlsClusterName = regexp.MustCompile(`^outbound\|(\d+)\|\|([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$`)

// checkEnvoyFilter checks a decoded EnvoyFilter: its targeting, its patches,
// and that the rate-limit filter it inserts reaches the envoy-rls Service
// over a gRPC port, or a cluster the filter adds, over HTTP/2. It returns
// the proxy to simulate.
func checkEnvoyFilter(ef *envoyFilterDoc, services []*corev1.Service) (*istioProxy, error) {
	var errs []error
	if err := checkTargeting(ef); err != nil {
		errs = append(errs, err)
	}
	if !ef.hasPriority {
		errs = append(errs, fmt.Errorf("%s: spec.priority must be set: it orders this filter against other EnvoyFilters", ef.where))
	}
	patches, err := decodePatches(ef)
	if err != nil {
		errs = append(errs, err)
	}
	p := &istioProxy{where: ef.where}
	// A filter may add the cluster its rate-limit service uses (a Unix
	// socket in the pod, components/sidecar-uds) instead of dialling a
	// Service. Clusters are the proxy's, not a listener's: their patches
	// name their own context.
	added := map[string]*clusterv3.Cluster{}
	for _, dp := range patches {
		if c, ok := dp.value.(*clusterv3.Cluster); ok && dp.cp.GetPatch().GetOperation() == networking.EnvoyFilter_Patch_ADD {
			added[c.GetName()] = c
		}
	}
	var filterPatches int
	for _, dp := range patches {
		ctx := dp.cp.GetMatch().GetContext()
		if ctx == networking.EnvoyFilter_ANY {
			errs = append(errs, fmt.Errorf("%s: match.context must name the proxy side (GATEWAY or SIDECAR_INBOUND), not ANY", dp.where))
		}
		if _, ok := dp.value.(*clusterv3.Cluster); ok {
			continue
		}
		if p.context == networking.EnvoyFilter_ANY {
			p.context = ctx
		} else if ctx != p.context {
			errs = append(errs, fmt.Errorf("%s: match.context %v differs from the filter's other patches (%v)", dp.where, ctx, p.context))
		}
		hf, ok := dp.value.(*hcmv3.HttpFilter)
		if !ok || hf.GetName() != rateLimitFilterName {
			continue
		}
		filterPatches++
		if op := dp.cp.GetPatch().GetOperation(); op != networking.EnvoyFilter_Patch_INSERT_BEFORE {
			errs = append(errs, fmt.Errorf("%s: operation %v, want INSERT_BEFORE the router", dp.where, op))
		}
		lm := dp.cp.GetMatch().GetListener().GetFilterChain().GetFilter()
		if lm.GetName() != hcmFilterName || lm.GetSubFilter().GetName() != routerFilterName {
			errs = append(errs, fmt.Errorf("%s: match.listener.filterChain.filter must be %s with subFilter %s", dp.where, hcmFilterName, routerFilterName))
		}
		cfg, ferrs := checkRateLimitFilter(dp.where, hf)
		errs = append(errs, ferrs...)
		if cfg != nil {
			p.filter = cfg
			name := cfg.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
			if c, ok := added[name]; ok {
				if err := checkHTTP2(c); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", dp.where, err))
				}
			} else if err := checkRLSCluster(name, services); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", dp.where, err))
			}
		}
	}
	if filterPatches != 1 {
		errs = append(errs, fmt.Errorf("%s: %d HTTP_FILTER patches insert %s, want 1", ef.where, filterPatches, rateLimitFilterName))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	vhosts, err := patchedVirtualHosts(p.context, patches)
	if err != nil {
		return nil, err
	}
	p.vhosts = vhosts
	return p, nil
}

// checkTargeting requires an EnvoyFilter to name the proxies it patches:
// pods by workloadSelector labels, or Gateway API gateways by targetRefs
// (Istio finds their proxies), not both.
func checkTargeting(ef *envoyFilterDoc) error {
	labels, refs := ef.spec.GetWorkloadSelector().GetLabels(), ef.spec.GetTargetRefs()
	switch {
	case len(labels) > 0 && len(refs) > 0:
		return fmt.Errorf("%s: spec.workloadSelector and spec.targetRefs are exclusive", ef.where)
	case len(labels) == 0 && len(refs) == 0:
		return fmt.Errorf("%s: spec.workloadSelector.labels or spec.targetRefs is required (without one the filter patches every proxy in the namespace)", ef.where)
	}
	for i, r := range refs {
		if r.GetGroup() != "gateway.networking.k8s.io" || r.GetKind() != "Gateway" || r.GetName() == "" {
			return fmt.Errorf("%s: spec.targetRefs[%d] %s/%s %q: want a gateway.networking.k8s.io Gateway by name", ef.where, i, r.GetGroup(), r.GetKind(), r.GetName())
		}
	}
	return nil
}

// checkRLSCluster checks that cluster is Istio's name for a gRPC port of a
// Service in the manifests.
func checkRLSCluster(cluster string, services []*corev1.Service) error {
	m := rlsClusterName.FindStringSubmatch(cluster)
	if m == nil {
		return fmt.Errorf("rate_limit_service cluster %q is not of the form outbound|PORT||SERVICE.NAMESPACE.svc.cluster.local, nor one a CLUSTER patch of this EnvoyFilter adds", cluster)
	}
	port, _ := strconv.Atoi(m[1])
	for _, s := range services {
		if s.Name != m[2] || s.Namespace != m[3] {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if int(sp.Port) != port {
				continue
			}
			if !strings.HasPrefix(sp.Name, "grpc") {
				return fmt.Errorf("rate_limit_service cluster %q: Service port %q is not named grpc-…, so Istio would not speak HTTP/2 to it", cluster, sp.Name)
			}
			return nil
		}
		return fmt.Errorf("rate_limit_service cluster %q: Service %s/%s has no port %d", cluster, m[3], m[2], port)
	}
	return fmt.Errorf("rate_limit_service cluster %q: no Service %s/%s in the manifests", cluster, m[3], m[2])
}

// baseVirtualHost returns the virtual host Istio generates before any
// EnvoyFilter applies. At the gateway it follows the VirtualService of
// docs/deploying.md (a route named "login" for /api/login and its subpaths,
// then a catch-all);
// a sidecar's inbound virtual host has a single catch-all route.
func baseVirtualHost(ctx networking.EnvoyFilter_PatchContext) (*routev3.VirtualHost, error) {
	to := func(cluster string) *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}
	}
	switch ctx {
	case networking.EnvoyFilter_GATEWAY:
		const cluster = "outbound|8000||httpbin.default.svc.cluster.local"
		return &routev3.VirtualHost{
			Name:    "edge.example.com:80",
			Domains: []string{"edge.example.com", "edge.example.com:*"},
			Routes: []*routev3.Route{
				{Name: "login", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "/api/login(/.*)?"}}}, Action: to(cluster)},
				{Name: "default", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: to(cluster)},
			},
		}, nil
	case networking.EnvoyFilter_SIDECAR_INBOUND:
		return &routev3.VirtualHost{
			Name:    "inbound|http|8000",
			Domains: []string{"*"},
			Routes: []*routev3.Route{
				{Name: "default", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: to("inbound|8080||")},
			},
		}, nil
	}
	return nil, fmt.Errorf("simulator: no model of the %v proxy", ctx)
}

// patchedVirtualHosts applies the VIRTUAL_HOST and HTTP_ROUTE patches to
// the base virtual host as Istio does (MERGE is proto.Merge: lists append).
func patchedVirtualHosts(ctx networking.EnvoyFilter_PatchContext, patches []decodedPatch) ([]*routev3.VirtualHost, error) {
	vh, err := baseVirtualHost(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, dp := range patches {
		at := dp.cp.GetApplyTo()
		if at != networking.EnvoyFilter_VIRTUAL_HOST && at != networking.EnvoyFilter_HTTP_ROUTE {
			continue
		}
		if dp.cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_MERGE {
			errs = append(errs, fmt.Errorf("%s: simulator: only MERGE is modelled for %v", dp.where, at))
			continue
		}
		vm := dp.cp.GetMatch().GetRouteConfiguration().GetVhost()
		if vm.GetName() != "" && vm.GetName() != vh.GetName() {
			continue
		}
		if at == networking.EnvoyFilter_VIRTUAL_HOST {
			proto.Merge(vh, dp.value)
			continue
		}
		rm := vm.GetRoute()
		matched := 0
		for _, r := range vh.GetRoutes() {
			if rm.GetName() != "" && rm.GetName() != r.GetName() {
				continue
			}
			if a := rm.GetAction(); a != networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ANY &&
				!(a == networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ROUTE && r.GetRoute() != nil) {
				continue
			}
			proto.Merge(r, dp.value)
			matched++
		}
		if matched == 0 {
			errs = append(errs, fmt.Errorf("%s: the route match selects no route of the modelled %v virtual host", dp.where, ctx))
		}
	}
	return []*routev3.VirtualHost{vh}, errors.Join(errs...)
}

// internalSamples are in-mesh requests reaching the sidecar variant, with
// the rules of domain "internal" each descriptor must reach.
func internalSamples() []sample {
	return []sample{
		{
			name: "a tenant's call",
			req:  sampleRequest{path: "/status", headers: map[string]string{"x-tenant-id": "acme"}},
			want: []wantDescriptor{{d("tenant", "acme"), "internal.tenant"}},
		},
		{
			name: "a trial tenant shares the trial pool",
			req:  sampleRequest{path: "/status", headers: map[string]string{"x-tenant-id": "trial-42"}},
			want: []wantDescriptor{{d("tenant", "trial-42"), "internal.tenant_trial-*"}},
		},
		{
			name: "a report",
			req:  sampleRequest{method: "POST", path: "/reports/weekly?format=csv", headers: map[string]string{"x-tenant-id": "acme"}},
			want: []wantDescriptor{
				{d("tenant", "acme"), "internal.tenant"},
				{d("generic_key", "reports", "tenant", "acme"), "internal.generic_key_reports.tenant"},
			},
		},
		{
			name: "a path that only starts like /reports is no report",
			req:  sampleRequest{path: "/reportsarchive", headers: map[string]string{"x-tenant-id": "acme"}},
			want: []wantDescriptor{{d("tenant", "acme"), "internal.tenant"}},
		},
		{
			name: "no tenant, no descriptor",
			req:  sampleRequest{path: "/reports"},
		},
	}
}

// samplesFor picks the sample requests for a filter's domain.
func samplesFor(domain string) ([]sample, error) {
	switch domain {
	case "edge":
		return edgeSamples(), nil
	case "internal":
		return internalSamples(), nil
	case "versions":
		return versionSamples(), nil
	}
	return nil, fmt.Errorf("no sample requests for domain %q: add them before shipping a filter for it", domain)
}

func TestEnvoyFiltersPatchValuesAndDescriptors(t *testing.T) {
	ruleFiles := exampleRuleFiles(t)
	snap := mustLoadRules(t, ruleFiles)
	objs, err := renderManifests(variantFS(t, []string{"components/sidecar"}, nil), ruleFiles)
	if err != nil {
		t.Fatal(err)
	}
	filters := envoyFilters(objs)
	if len(filters) != 2 {
		t.Fatalf("rendered %d EnvoyFilters, want the gateway's and the sidecar's", len(filters))
	}
	contexts := map[networking.EnvoyFilter_PatchContext]bool{}
	for _, ef := range filters {
		t.Run(ef.meta.Name, func(t *testing.T) {
			p, err := checkEnvoyFilter(ef, objs.Services)
			if err != nil {
				t.Fatal(err)
			}
			contexts[p.context] = true
			samples, err := samplesFor(p.filter.GetDomain())
			if err != nil {
				t.Fatal(err)
			}
			if err := checkSamples(p.where, p.filter, p.vhosts, snap, samples); err != nil {
				t.Error(err)
			}
		})
	}
	for _, want := range []networking.EnvoyFilter_PatchContext{networking.EnvoyFilter_GATEWAY, networking.EnvoyFilter_SIDECAR_INBOUND} {
		if !contexts[want] {
			t.Errorf("no EnvoyFilter patches the %v proxies", want)
		}
	}
}
