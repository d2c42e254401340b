package istio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	gatewayFilter = "manifests/istio/envoyfilter-gateway.yaml"
	sidecarFilter = "manifests/istio/components/sidecar/envoyfilter-sidecar.yaml"
	udsPatch      = "manifests/istio/components/sidecar-uds/envoyfilter-uds.yaml"
)

// brokenCopies break a shipped EnvoyFilter the ways users break theirs in
// the field. The first three pass Envoy's and Istio's schema checks: only
// istiod knows that their patches land nowhere. The others are refused by
// istiod or Envoy, or land where they do no good. One breakage is not
// here because the real istiod lets it through: an unknown field in a
// patch's typed_config (failure_mode_dny) is dropped silently, and the
// filter works without it; test/meshconfig's strict decoding of each
// patch into its Envoy type catches that one (mesh_mutation_test.go).
var brokenCopies = []struct {
	name string
	// variant is the kustomize variant ("" is the base), file the shipped
	// file broken in it.
	variant, file string
	old, new      string
	// want are fragments of the failure message.
	want []string
}{
	{
		name: "HTTP_FILTER with context SIDECAR_INBOUND on a gateway",
		file: gatewayFilter,
		old:  "  - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n",
		new:  "  - applyTo: HTTP_FILTER\n    match:\n      context: SIDECAR_INBOUND\n",
		want: []string{"no HTTP filter chain holds envoy.filters.http.ratelimit"},
	},
	{
		name: "VIRTUAL_HOST matching a vhost name istiod never generates",
		file: gatewayFilter,
		old:  "  - applyTo: VIRTUAL_HOST\n    match:\n      context: GATEWAY\n      routeConfiguration:\n        vhost:\n",
		new:  "  - applyTo: VIRTUAL_HOST\n    match:\n      context: GATEWAY\n      routeConfiguration:\n        vhost:\n          name: edge.example.com\n",
		want: []string{"the patch's routeConfiguration match selects no virtual host"},
	},
	{
		name: "workloadSelector selecting no gateway",
		file: gatewayFilter,
		old:  "      istio: ingressgateway\n",
		new:  "      istio: ingress-gateway\n",
		want: []string{"no HTTP filter chain holds envoy.filters.http.ratelimit"},
	},
	{
		name: "route patch whose match selects no route",
		file: gatewayFilter, old: "            name: login\n", new: "            name: logon\n",
		want: []string{"the patch's route match selects no route"},
	},
	{
		name:    "a Gateway API gateway keeps the route patch by name, which no HTTPRoute route carries",
		variant: "gateway-api", file: "manifests/istio/components/gateway-api/envoyfilter-targetref.yaml",
		old: "- op: remove\n  path: /spec/configPatches/2\n", new: "",
		// The test routes with a VirtualService, whose route is named
		// login: the descriptor kept on it counts each request twice.
		want: []string{"2 requests passed before the first 429, want 5"},
	},
	{
		name: "bad @type of the rate-limit filter",
		file: gatewayFilter, old: "ratelimit.v3.RateLimit\n", new: "ratelimit.v3.RateLimits\n",
		want: []string{"istiod refused the config directory", "could not resolve Any message type: type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimits"},
	},
	{
		name: "rate-limit service on a cluster no Service makes",
		file: gatewayFilter, old: "cluster_name: outbound|8081||", new: "cluster_name: outbound|9081||",
		want: []string{`rate_limit_service cluster "outbound|9081||envoy-rls.envoy-rls.svc.cluster.local" is not a cluster of the proxy`},
	},
	{
		name: "empty domain",
		file: gatewayFilter, old: "          domain: edge\n", new: "          domain: \"\"\n",
		want: []string{"Listener rejected by the proxy (NACK", "Domain"},
	},
	{
		name: "misspelt rate_limits action, merged into the virtual host",
		file: gatewayFilter, old: "        - actions:\n          - remote_address: {}\n", new: "        - actions:\n          - remote_adress: {}\n",
		// istiod drops the unknown field; Envoy refuses the empty action.
		want: []string{"RouteConfiguration rejected by the proxy (NACK"},
	},
	{
		name: "bad enum in the per-route config, merged into the login route",
		file: gatewayFilter, old: "vh_rate_limits: INCLUDE", new: "vh_rate_limits: INCLUDED",
		want: []string{"istiod refused the config directory", "INCLUDED"},
	},
	{
		name:    "added cluster of an unknown discovery type",
		variant: "sidecar-uds", file: udsPatch, old: "type: STATIC", new: "type: STATICAL",
		want: []string{"istiod refused the config directory", "STATICAL"},
	},
	{
		name:    "filter pointed at a cluster nothing adds",
		variant: "sidecar-uds", file: udsPatch,
		old: "    cluster_name: envoy_rls_uds\n# The cluster", new: "    cluster_name: envoy_rls_socket\n# The cluster",
		want: []string{`rate_limit_service cluster "envoy_rls_socket" is not a cluster of the proxy`},
	},
	{
		name:    "sidecar filter inserted after the router",
		variant: "sidecar", file: sidecarFilter, old: "operation: INSERT_BEFORE", new: "operation: INSERT_AFTER",
		want: []string{"Listener rejected by the proxy (NACK", "envoy.filters.http.router must be the last filter"},
	},
}

// TestBrokenCopies proves that the suite catches what a model of istiod
// cannot: each broken copy must fail the check with a message naming the
// manifest and what istiod did with it.
func TestBrokenCopies(t *testing.T) {
	for _, bc := range brokenCopies {
		t.Run(bc.name, func(t *testing.T) {
			orig, err := os.ReadFile(filepath.Join(repoRoot(t), bc.file))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(orig), bc.old); n != 1 {
				t.Fatalf("%s holds %q %d times, want once: the broken copy would not be what it says", bc.file, bc.old, n)
			}
			broken := strings.Replace(string(orig), bc.old, bc.new, 1)
			variant := bc.variant
			if variant == "" {
				variant = "base"
			}
			set := kustomizeSet(t, variant, map[string][]byte{bc.file: []byte(broken)})
			set.Name = bc.file + " broken (" + bc.name + "), kustomize " + variant
			m, err := startMesh(t, set)
			if err == nil {
				_, err = m.check()
			}
			if err == nil {
				t.Fatalf("%s: the check passed", set.Name)
			}
			msg := err.Error()
			for _, want := range append([]string{set.Name, "EnvoyFilters [", "istiod"}, bc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("the failure message lacks %q:\n%s", want, msg)
				}
			}
			t.Logf("the failure, as a user would see it:\n%s", msg)
		})
	}
}
