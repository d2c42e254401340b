package meshconfig

import (
	"maps"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

// The components that point the gateway EnvoyFilter at other kinds of
// gateway, and the operator's components.
const (
	gatewayHelmComponent   = "components/gateway-helm"
	gatewayAPIComponent    = "components/gateway-api"
	networkPolicyComponent = "components/network-policy"
	hpaComponent           = "components/hpa"
	monitoringComponent    = "components/monitoring"
)

// TestGatewayKinds builds the gateway EnvoyFilter for each kind of Istio
// ingress gateway: it must target that kind's proxies (istioctl's and the
// Helm chart's by their pod labels, a Gateway API gateway by targetRefs
// naming a Gateway of the build) and still send every sample request's
// descriptors to the intended rules of examples/config.
func TestGatewayKinds(t *testing.T) {
	ruleFiles := exampleRuleFiles(t)
	snap := mustLoadRules(t, ruleFiles)
	for _, tc := range []struct {
		name       string
		components []string
		labels     map[string]string
		gateway    string
	}{
		{"istioctl", nil, map[string]string{"istio": "ingressgateway"}, ""},
		{"helm", []string{gatewayHelmComponent}, map[string]string{"istio": "ingress"}, ""},
		{"gateway-api", []string{gatewayAPIComponent}, nil, "edge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := renderManifests(variantFS(t, tc.components, nil), ruleFiles)
			if err != nil {
				t.Fatal(err)
			}
			var gw *envoyFilterDoc
			for _, ef := range envoyFilters(objs) {
				if ef.meta.Name == "envoy-rls-gateway" {
					gw = ef
				}
			}
			if gw == nil {
				t.Fatal("no EnvoyFilter envoy-rls-gateway in the build")
			}
			p, err := checkEnvoyFilter(gw, objs.Services)
			if err != nil {
				t.Fatal(err)
			}
			if p.context != networking.EnvoyFilter_GATEWAY {
				t.Errorf("context %v, want GATEWAY", p.context)
			}
			if got := gw.spec.GetWorkloadSelector().GetLabels(); !maps.Equal(got, tc.labels) {
				t.Errorf("workloadSelector labels %v, want %v", got, tc.labels)
			}
			var refs []string
			for _, r := range gw.spec.GetTargetRefs() {
				refs = append(refs, r.GetName())
				found := false
				for _, g := range objs.Gateways {
					found = found || (g.Namespace == gw.meta.Namespace && g.Name == r.GetName() && g.Spec.GatewayClassName == "istio")
				}
				if !found {
					t.Errorf("targetRefs names Gateway %s, which is not an Istio Gateway of the build in %s", r.GetName(), gw.meta.Namespace)
				}
			}
			if tc.gateway != "" && (len(refs) != 1 || refs[0] != tc.gateway) {
				t.Errorf("targetRefs %v, want Gateway %s", refs, tc.gateway)
			}
			if err := checkSamples(p.where, p.filter, p.vhosts, snap, edgeSamples()); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestGatewayFiltersOfferResourceExhausted: the shipped filters answer a
// limited gRPC call RESOURCE_EXHAUSTED, not UNAVAILABLE.
func TestGatewayFiltersOfferResourceExhausted(t *testing.T) {
	objs, err := renderManifests(variantFS(t, []string{"components/sidecar"}, nil), exampleRuleFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, ef := range envoyFilters(objs) {
		p, err := checkEnvoyFilter(ef, objs.Services)
		if err != nil {
			t.Fatal(err)
		}
		if !p.filter.GetRateLimitedAsResourceExhausted() {
			t.Errorf("%s: rate_limited_as_resource_exhausted is off", p.where)
		}
	}
}
