package istio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brokenGateway is the base with the gateway EnvoyFilter broken the way
// users break theirs in the field: each is accepted by Envoy's and Istio's
// schema checks, and only istiod knows that its patches land nowhere.
var brokenGateway = []struct {
	name     string
	old, new string
	// want is in the failure message.
	want string
}{
	{
		name: "HTTP_FILTER with context SIDECAR_INBOUND on a gateway",
		old:  "  - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n",
		new:  "  - applyTo: HTTP_FILTER\n    match:\n      context: SIDECAR_INBOUND\n",
		want: "no HTTP filter chain holds envoy.filters.http.ratelimit",
	},
	{
		name: "VIRTUAL_HOST matching a vhost name istiod never generates",
		old:  "  - applyTo: VIRTUAL_HOST\n    match:\n      context: GATEWAY\n      routeConfiguration:\n        vhost:\n",
		new:  "  - applyTo: VIRTUAL_HOST\n    match:\n      context: GATEWAY\n      routeConfiguration:\n        vhost:\n          name: edge.example.com\n",
		want: "the patch's routeConfiguration match selects no virtual host",
	},
	{
		name: "workloadSelector selecting no gateway",
		old:  "      istio: ingressgateway\n",
		new:  "      istio: ingress-gateway\n",
		want: "no HTTP filter chain holds envoy.filters.http.ratelimit",
	},
}

// TestBrokenGatewayFilter proves that the suite catches what the model of
// internal/istiopatch cannot: each broken copy must fail the check with a
// message naming the manifest and what istiod did with it.
func TestBrokenGatewayFilter(t *testing.T) {
	const rel = "manifests/istio/envoyfilter-gateway.yaml"
	orig, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	for _, bc := range brokenGateway {
		t.Run(bc.name, func(t *testing.T) {
			if n := strings.Count(string(orig), bc.old); n != 1 {
				t.Fatalf("%s holds %q %d times, want once: the broken copy would not be what it says", rel, bc.old, n)
			}
			broken := strings.Replace(string(orig), bc.old, bc.new, 1)
			set := kustomizeSet(t, "base", map[string][]byte{rel: []byte(broken)})
			set.Name = rel + " broken (" + bc.name + "), kustomize base"
			m := startMesh(t, set)
			_, err := m.check()
			if err == nil {
				t.Fatalf("%s: the check passed", set.Name)
			}
			msg := err.Error()
			for _, want := range []string{set.Name, "EnvoyFilters [istio-system/envoy-rls-gateway]", "istiod accepted EnvoyFilter istio-system/envoy-rls-gateway and pushed to the proxy (sent = acked", bc.want} {
				if !strings.Contains(msg, want) {
					t.Errorf("the failure message lacks %q:\n%s", want, msg)
				}
			}
			t.Logf("the failure, as a user would see it:\n%s", msg)
		})
	}
}
