package istio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// The proxies the shipped manifests are written for, as a cluster runs
// them: pilot-agent would announce these names and labels.
var (
	// istioctl's default profile's ingress gateway.
	istioctlGateway = proxySpec{Gateway: true, Name: "istio-ingressgateway", Namespace: "istio-system",
		Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}}
	// Istio's gateway Helm chart's.
	helmGateway = proxySpec{Gateway: true, Name: "istio-ingress", Namespace: "istio-system",
		Labels: map[string]string{"istio": "ingress", "app": "istio-ingress"}}
	// Istio's sample httpbin, the workload components/sidecar selects.
	httpbinSidecar = proxySpec{Name: "httpbin", Namespace: "default",
		Labels: map[string]string{"app": "httpbin", "version": "v1"}}
	// Bookinfo's reviews, the workload components/per-version selects.
	reviewsSidecar = proxySpec{Name: "reviews-v2", Namespace: "default",
		Labels: map[string]string{"app": "reviews", "version": "v2"}}
)

// gatewayAPIGateway is the proxy Istio deploys for a Gateway API Gateway.
func gatewayAPIGateway(namespace, name string) proxySpec {
	return proxySpec{Gateway: true, Name: name + "-istio", Namespace: namespace,
		Labels: map[string]string{"gateway.networking.k8s.io/gateway-name": name}}
}

// customGateway is a gateway picked by the chart's istio.gateway.selector.
func customGateway(namespace string, labels map[string]string) proxySpec {
	return proxySpec{Gateway: true, Name: "custom-gateway", Namespace: namespace, Labels: labels}
}

// proxiesFor is, per manifest variant, the gateway and the sidecar it is
// for. Every component and values set must have an entry: a new one
// fails the test until it is added here.
type proxiesFor struct {
	gateway *proxySpec
	sidecar *proxySpec
}

var kustomizeProxies = map[string]proxiesFor{
	"base":           {gateway: &istioctlGateway},
	"sidecar":        {gateway: &istioctlGateway, sidecar: &httpbinSidecar},
	"sidecar-uds":    {gateway: &istioctlGateway, sidecar: &httpbinSidecar},
	"managed-redis":  {gateway: &istioctlGateway},
	"per-version":    {gateway: &istioctlGateway, sidecar: &reviewsSidecar},
	"gateway-helm":   {gateway: &helmGateway},
	"gateway-api":    {gateway: ptr(gatewayAPIGateway("istio-system", "edge"))},
	"network-policy": {gateway: &istioctlGateway},
	"hpa":            {gateway: &istioctlGateway},
	"monitoring":     {gateway: &istioctlGateway},
}

var chartProxies = map[string]proxiesFor{
	"defaults":               {gateway: &istioctlGateway},
	"cluster-values":         {gateway: ptr(customGateway("edge", map[string]string{"app": "edge-gateway"}))},
	"existing-config-values": {gateway: &istioctlGateway},
	"sentinel-values":        {gateway: &helmGateway},
	"standalone-tls-values":  {gateway: &istioctlGateway, sidecar: &httpbinSidecar},
	"xds-values":             {gateway: ptr(gatewayAPIGateway("istio-ingress", "edge"))},
}

// guideProxies is, per EnvoyFilter name in the guides, the proxy it is
// written for.
var guideProxies = map[string]proxiesFor{
	"envoy-rls-gateway": {gateway: &istioctlGateway},
	"envoy-rls-sidecar": {sidecar: &httpbinSidecar},
}

// guideKeeps is, per EnvoyFilter name, the kustomize component whose
// same-named EnvoyFilter's HTTP_ROUTE patches a guide's block is used
// with: docs/deploying.md shows the Unix-socket sidecar's filter without
// them and says "Keep the component's HTTP_ROUTE patch as it is".
var guideKeeps = map[string]string{"envoy-rls-sidecar": "sidecar"}

// withRoutePatches returns the guide's EnvoyFilter with the HTTP_ROUTE
// patches of the component's same-named filter appended, when the guide's
// has none of its own.
func withRoutePatches(t *testing.T, f object, component string) object {
	t.Helper()
	var whole map[string]any
	if err := json.Unmarshal(f.raw, &whole); err != nil {
		t.Fatal(err)
	}
	spec := whole["spec"].(map[string]any)
	patches, _ := spec["configPatches"].([]any)
	for _, p := range patches {
		if p.(map[string]any)["applyTo"] == "HTTP_ROUTE" {
			return f
		}
	}
	var added int
	for _, o := range kustomizeSet(t, component, nil).envoyFilters() {
		if o.Metadata.Name != f.Metadata.Name {
			continue
		}
		var src map[string]any
		if err := json.Unmarshal(o.raw, &src); err != nil {
			t.Fatal(err)
		}
		for _, p := range src["spec"].(map[string]any)["configPatches"].([]any) {
			if p.(map[string]any)["applyTo"] == "HTTP_ROUTE" {
				patches = append(patches, p)
				added++
			}
		}
	}
	if added == 0 {
		t.Fatalf("components/%s has no EnvoyFilter %s with an HTTP_ROUTE patch to keep", component, f.Metadata.Name)
	}
	spec["configPatches"] = patches
	raw, err := json.Marshal(whole)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects(f.String(), raw)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%v: %v", f, err)
	}
	return objs[0]
}

func ptr[T any](v T) *T { return &v }

func (p proxiesFor) apply(set *manifestSet) {
	if p.gateway != nil {
		set.Gateways = append(set.Gateways, *p.gateway)
	}
	if p.sidecar != nil {
		set.Sidecar = p.sidecar
	}
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := shipped.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// componentNeeds lists the components a component only works after.
var componentNeeds = map[string][]string{
	"components/sidecar-uds": {"components/sidecar"},
}

// kustomizeSet renders the base, or the base with a component (and what
// it needs), with overrides of the tree's files.
func kustomizeSet(t *testing.T, variant string, overrides map[string][]byte) manifestSet {
	t.Helper()
	var comps []string
	if variant != "base" {
		c := "components/" + variant
		comps = append(slices.Clone(componentNeeds[c]), c)
	}
	fsys, err := shipped.VariantFS(repoRoot(t), comps, overrides)
	if err != nil {
		t.Fatal(err)
	}
	out, err := shipped.KustomizeBuild(fsys, "/"+shipped.ManifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	set := manifestSet{Name: "kustomize " + variant}
	if set.Objects, err = parseObjects(set.Name, out); err != nil {
		t.Fatal(err)
	}
	p, ok := kustomizeProxies[variant]
	if !ok {
		t.Fatalf("%s: no entry in kustomizeProxies: say which gateway and sidecar the component is for", set.Name)
	}
	p.apply(&set)
	return set
}

// chartSet renders the chart over a values set, as a user runs helm
// template.
func chartSet(t *testing.T, values string) manifestSet {
	t.Helper()
	args := []string{"template", "envoy-rls", shipped.ChartDir, "--namespace", "envoy-rls"}
	if values != "" {
		args = append(args, "-f", values)
	}
	out, err := shipped.Helm(repoRoot(t), t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	name := shipped.ValuesName(values)
	set := manifestSet{Name: "helm template " + name}
	if set.Objects, err = parseObjects(set.Name, out); err != nil {
		t.Fatal(err)
	}
	p, ok := chartProxies[name]
	if !ok {
		t.Fatalf("%s: no entry in chartProxies: say which gateway and sidecar the values set is for", set.Name)
	}
	p.apply(&set)
	return set
}

// runSet starts a mesh for the set and checks it, failing t with the
// check's message.
func runSet(t *testing.T, set manifestSet) {
	t.Helper()
	if len(set.envoyFilters()) == 0 {
		t.Fatalf("%s renders no EnvoyFilter", set.Name)
	}
	m, err := startMesh(t, set)
	if err != nil {
		t.Fatal(err)
	}
	proven, err := m.check()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(proven, m.Limited...) {
		t.Log(p)
	}
}

func TestKustomize(t *testing.T) {
	comps, err := shipped.Components(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	variants := []string{"base"}
	for _, c := range comps {
		variants = append(variants, filepath.Base(c))
	}
	for _, v := range variants {
		t.Run(v, func(t *testing.T) { runSet(t, kustomizeSet(t, v, nil)) })
	}
}

func TestChart(t *testing.T) {
	values, err := shipped.ChartValues(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		t.Run(shipped.ValuesName(v), func(t *testing.T) { runSet(t, chartSet(t, v)) })
	}
}

// TestGuides applies each EnvoyFilter the guides show whole (README.md and
// docs/*.md) to the proxy it is written for, beside the base install's
// envoy-rls (its Service and rules).
func TestGuides(t *testing.T) {
	root := repoRoot(t)
	docs, err := shipped.Glob(root, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rel := range append([]string{"README.md"}, docs...) {
		md, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range shipped.YAMLBlocks(string(md)) {
			if !strings.Contains(b, "kind: EnvoyFilter") {
				continue
			}
			n++
			t.Run(fmt.Sprintf("%s-block-%d", rel, i), func(t *testing.T) {
				base := kustomizeSet(t, "base", nil)
				set := manifestSet{Name: fmt.Sprintf("%s block %d", rel, i)}
				objs, err := parseObjects(set.Name, []byte(b))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range base.Objects {
					if o.Kind != "EnvoyFilter" {
						set.Objects = append(set.Objects, o)
					}
				}
				for _, o := range objs {
					if c, ok := guideKeeps[o.Metadata.Name]; ok && o.Kind == "EnvoyFilter" {
						o = withRoutePatches(t, o, c)
					}
					set.Objects = append(set.Objects, o)
				}
				for _, f := range set.envoyFilters() {
					p, ok := guideProxies[f.Metadata.Name]
					if !ok {
						t.Fatalf("%s: EnvoyFilter %s has no entry in guideProxies: say which proxy it is for", set.Name, f.Metadata.Name)
					}
					p.apply(&set)
				}
				runSet(t, set)
			})
		}
	}
	// docs/deploying.md shows the Unix-socket sidecar's EnvoyFilter whole;
	// finding nothing means the block scan broke.
	if n == 0 {
		t.Fatal("no EnvoyFilter found in README.md or docs/*.md; docs/deploying.md has one")
	}
}
