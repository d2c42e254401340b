package validate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// TestBrokenCopiesFail: copies of the shipped EnvoyFilters, each broken in
// one way that Envoy (or, for a match that selects nothing, istiod's
// silence) would make a broken install, must fail the checks with the
// message naming what is wrong.
func TestBrokenCopiesFail(t *testing.T) {
	const (
		gateway = "manifests/istio/envoyfilter-gateway.yaml"
		uds     = "manifests/istio/components/sidecar-uds/envoyfilter-uds.yaml"
		sidecar = "manifests/istio/components/sidecar/envoyfilter-sidecar.yaml"
	)
	tests := []struct {
		name     string
		variant  manifestVariant
		file     string
		old, new string
		// want are fragments of the failure message (Envoy's own, where
		// Envoy is the one refusing).
		want []string
	}{
		{
			name: "unknown field in the rate-limit filter's typed_config",
			file: gateway, old: "          domain: edge\n", new: "          domain: edge\n          failure_mode_dny: true\n",
			want: []string{"envoy --mode validate", "failure_mode_dny"},
		},
		{
			name: "bad @type of the rate-limit filter",
			file: gateway, old: "ratelimit.v3.RateLimit\n", new: "ratelimit.v3.RateLimits\n",
			want: []string{"envoy --mode validate", "ratelimit.v3.RateLimits"},
		},
		{
			name: "rate-limit service on a cluster no Service makes",
			file: gateway, old: "cluster_name: outbound|8081||", new: "cluster_name: outbound|9081||",
			want: []string{`rate_limit_service cluster "outbound|9081||envoy-rls.envoy-rls.svc.cluster.local" is not a cluster of the proxy`},
		},
		{
			name: "empty domain",
			file: gateway, old: "          domain: edge\n", new: "          domain: \"\"\n",
			want: []string{"envoy --mode validate", "Domain"},
		},
		{
			name: "misspelt rate_limits action, merged into the virtual host",
			file: gateway, old: "        - actions:\n          - remote_address: {}\n", new: "        - actions:\n          - remote_adress: {}\n",
			want: []string{"envoy --mode validate", "remote_adress"},
		},
		{
			name: "bad enum in the per-route config, merged into the login route",
			file: gateway, old: "vh_rate_limits: INCLUDE", new: "vh_rate_limits: INCLUDED",
			want: []string{"envoy --mode validate", "INCLUDED"},
		},
		{
			name: "route patch whose match selects no route",
			file: gateway, old: "            name: login\n", new: "            name: logon\n",
			want: []string{"configPatches[2] (HTTP_ROUTE MERGE) changed nothing"},
		},
		{
			name:    "a Gateway API gateway keeps the route patch by name, which no HTTPRoute route carries",
			variant: manifestVariant{name: "gateway-api", components: []string{"components/gateway-api"}},
			file:    "manifests/istio/components/gateway-api/envoyfilter-targetref.yaml",
			old:     "- op: remove\n  path: /spec/configPatches/2\n", new: "",
			want: []string{"configPatches[2] (HTTP_ROUTE MERGE) changed nothing"},
		},
		{
			name:    "added cluster of an unknown discovery type",
			variant: manifestVariant{name: "sidecar-uds", components: []string{"components/sidecar", "components/sidecar-uds"}},
			file:    uds, old: "type: STATIC", new: "type: STATICAL",
			want: []string{"envoy --mode validate", "STATICAL"},
		},
		{
			name:    "filter pointed at a cluster nothing adds",
			variant: manifestVariant{name: "sidecar-uds", components: []string{"components/sidecar", "components/sidecar-uds"}},
			file:    uds, old: "    cluster_name: envoy_rls_uds\n# The cluster", new: "    cluster_name: envoy_rls_socket\n# The cluster",
			want: []string{`rate_limit_service cluster "envoy_rls_socket" is not a cluster of the proxy`},
		},
		{
			name:    "sidecar filter inserted after the router",
			variant: manifestVariant{name: "sidecar", components: []string{"components/sidecar"}},
			file:    sidecar, old: "operation: INSERT_BEFORE", new: "operation: INSERT_AFTER",
			want: []string{"want envoy.filters.http.ratelimit right before envoy.filters.http.router"},
		},
	}
	root := childproc.Root()
	t.Run("envoy.yaml with an unknown field", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "envoy-config/envoy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		broken := mutate(t, data, "domain: edge\n", "domain: edge\n              failure_mode_dny: true\n")
		wantFailure(t, checkBootstrap(t, "broken-envoy.yaml", broken), "envoy --mode validate", "failure_mode_dny")
	})
	t.Run("envoy.yaml's filter on a cluster it does not define", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "envoy-config/envoy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		broken := mutate(t, data, "cluster_name: envoy_rls\n", "cluster_name: envoy_rls_typo\n")
		wantFailure(t, checkBootstrap(t, "broken-envoy.yaml", broken), `rate_limit_service cluster "envoy_rls_typo" is not a cluster of the proxy`)
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			broken := mutate(t, data, tc.old, tc.new)
			v := tc.variant
			if v.name == "" {
				v.name = "base"
			}
			r, err := renderVariant(t, v, map[string][]byte{tc.file: broken})
			if err == nil {
				err = checkFilters(t, "broken-"+v.name, r)
			}
			wantFailure(t, err, tc.want...)
		})
	}
}

// mutate returns data with the first old replaced by repl, failing the
// test when old is gone (the broken copy would test nothing).
func mutate(t *testing.T, data []byte, old, repl string) []byte {
	t.Helper()
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("the shipped file no longer holds %q: update the broken copy", old)
	}
	return bytes.Replace(data, []byte(old), []byte(repl), 1)
}

// wantFailure fails the test unless err names every fragment.
func wantFailure(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("the broken copy passed")
	}
	t.Logf("fails as it must:\n%v", err)
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("the failure does not name %q:\n%v", f, err)
		}
	}
}
