package meshconfig

import (
	"fmt"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// The two front-proxy bootstraps: one that runs as shipped on a laptop
// (make run-envoy), and its docker-compose variant (test/e2e).
const (
	laptopBootstrap  = "examples/envoy/envoy.yaml"
	composeBootstrap = "envoy-config/envoy.yaml"
)

// TestLaptopBootstrapIsTheComposeOne: the laptop bootstrap limits what the
// compose one limits (the same rate-limit filter and the same virtual
// hosts, so every descriptor test of envoy-config/envoy.yaml holds for it)
// and listens and dials only on 127.0.0.1, its admin interface too.
func TestLaptopBootstrapIsTheComposeOne(t *testing.T) {
	laptop, compose := ingressOf(t, laptopBootstrap), ingressOf(t, composeBootstrap)
	if !proto.Equal(laptop.GetRouteConfig(), compose.GetRouteConfig()) {
		t.Errorf("the ingress route_config differs:\n%s: %v\n%s: %v", laptopBootstrap, laptop.GetRouteConfig(), composeBootstrap, compose.GetRouteConfig())
	}
	if len(laptop.GetHttpFilters()) != len(compose.GetHttpFilters()) {
		t.Fatalf("%d http_filters in %s, %d in %s", len(laptop.GetHttpFilters()), laptopBootstrap, len(compose.GetHttpFilters()), composeBootstrap)
	}
	for i, f := range laptop.GetHttpFilters() {
		if !proto.Equal(f, compose.GetHttpFilters()[i]) {
			t.Errorf("http_filters[%d] differs:\n%s: %v\n%s: %v", i, laptopBootstrap, f, composeBootstrap, compose.GetHttpFilters()[i])
		}
	}
	for _, h := range []*hcmv3.HttpConnectionManager{laptop, compose} {
		if !h.GetNormalizePath().GetValue() || !h.GetMergeSlashes() ||
			h.GetPathWithEscapedSlashesAction() != hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD {
			t.Errorf("an ingress connection manager does not normalize paths (normalize_path, merge_slashes, UNESCAPE_AND_FORWARD): a route's limits would miss /api%%2Flogin")
		}
	}

	var b bootstrapv3.Bootstrap
	if err := unmarshalYAML(childproc.ReadRepoFile(t, laptopBootstrap), &b); err != nil {
		t.Fatal(err)
	}
	check := func(where string, a *corev3.Address) {
		if sa := a.GetSocketAddress(); sa == nil || sa.GetAddress() != "127.0.0.1" {
			t.Errorf("%s: %s is %v, want a socket address on 127.0.0.1", laptopBootstrap, where, a)
		}
	}
	check("the admin address", b.GetAdmin().GetAddress())
	for _, li := range b.GetStaticResources().GetListeners() {
		check(fmt.Sprintf("listener %q", li.GetName()), li.GetAddress())
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		for _, e := range cl.GetLoadAssignment().GetEndpoints() {
			for _, le := range e.GetLbEndpoints() {
				check(fmt.Sprintf("cluster %q's endpoint", cl.GetName()), le.GetEndpoint().GetAddress())
			}
		}
	}
}

// ingressOf returns the connection manager of the bootstrap's listener
// named ingress, which must have exactly one.
func ingressOf(t *testing.T, name string) *hcmv3.HttpConnectionManager {
	t.Helper()
	var b bootstrapv3.Bootstrap
	if err := unmarshalYAML(childproc.ReadRepoFile(t, name), &b); err != nil {
		t.Fatal(err)
	}
	var out []*hcmv3.HttpConnectionManager
	for _, li := range b.GetStaticResources().GetListeners() {
		if li.GetName() != "ingress" {
			continue
		}
		for _, fc := range li.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilterName {
					continue
				}
				var h hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&h); err != nil {
					t.Fatalf("%s: listener ingress: %v", name, err)
				}
				out = append(out, &h)
			}
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d connection managers on a listener named ingress, want 1", name, len(out))
	}
	return out[0]
}
