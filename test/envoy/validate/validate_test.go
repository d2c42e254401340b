package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/istiopatch"
	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

const (
	rateLimitFilter = "envoy.filters.http.ratelimit"
	routerFilter    = "envoy.filters.http.router"
)

// rendered is what the checks need of a rendered manifest stream.
type rendered struct {
	filters  []istiopatch.Filter
	services []*corev1.Service
}

// parseRendered picks the EnvoyFilters and Services out of a
// multi-document YAML stream (kustomize's or helm's output, a guide's
// block).
func parseRendered(where string, stream []byte) (rendered, error) {
	var r rendered
	docs, err := kubelint.SplitYAML(stream)
	if err != nil {
		return r, fmt.Errorf("%s: %w", where, err)
	}
	for _, doc := range docs {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return r, fmt.Errorf("%s: %w", where, err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			return r, fmt.Errorf("%s: %w", where, err)
		}
		switch head.Kind {
		case "EnvoyFilter":
			f, err := istiopatch.ParseSpec(head.Metadata.Namespace+"/"+head.Metadata.Name, head.Spec)
			if err != nil {
				return r, fmt.Errorf("%s: %w", where, err)
			}
			r.filters = append(r.filters, f)
		case "Service":
			var s corev1.Service
			if err := json.Unmarshal(js, &s); err != nil {
				return r, fmt.Errorf("%s: Service %s: %w", where, head.Metadata.Name, err)
			}
			r.services = append(r.services, &s)
		}
	}
	return r, nil
}

// proxies are the proxy kinds every EnvoyFilter is tried on.
var proxies = []istiopatch.Proxy{istiopatch.Sidecar, istiopatch.Gateway}

// checkFilters applies each EnvoyFilter to the bootstrap of every proxy
// kind it has patches for and has Envoy validate the result. A patch that
// changes nothing on a proxy it is meant for (its match selects nothing
// istiod generates there) fails, as does a filter that fits no proxy, and
// what checkRateLimitFilters finds.
func checkFilters(t *testing.T, where string, r rendered) error {
	t.Helper()
	var errs []error
	for _, f := range r.filters {
		landed := 0
		for _, p := range proxies {
			b := proxyBootstrap(p, f, r.services)
			applied, err := istiopatch.Apply(b, p, f)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			if len(applied) == 0 {
				continue
			}
			landed++
			for _, a := range applied {
				if a.Count == 0 {
					errs = append(errs, fmt.Errorf("%s: %s changed nothing on a %v: its match selects nothing istiod generates there", where, a.Where, p))
				}
			}
			errs = append(errs, checkRateLimitFilters(fmt.Sprintf("%s: EnvoyFilter %s on a %v", where, f.Name, p), b))
			doc, err := toYAML(b)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := envoytest.Validate(t, fmt.Sprintf("%s-%s-%v", where, f.Name, p), doc); err != nil {
				errs = append(errs, fmt.Errorf("%s: EnvoyFilter %s applied to a %v: %w", where, f.Name, p, err))
			}
		}
		if landed == 0 {
			errs = append(errs, fmt.Errorf("%s: EnvoyFilter %s has no patch for a sidecar or a gateway", where, f.Name))
		}
	}
	return errors.Join(errs...)
}

// checkRateLimitFilters checks, in a patched bootstrap, what Envoy does
// not: wherever the rate-limit filter was inserted it runs right before
// the router, which stays last (what the shipped filters' comments
// promise: the filters other EnvoyFilters insert before the router run
// before it), and its rate-limit service is a cluster the proxy has.
// Envoy 1.40 loads a rate-limit filter whose cluster does not exist, both
// in --mode validate and for real, and then fails every check at request
// time, which failure_mode_deny: false turns into no limiting at all.
func checkRateLimitFilters(where string, b map[string]any) error {
	var errs []error
	sr, _ := b["static_resources"].(map[string]any)
	clusters := map[string]bool{}
	for _, c := range list(sr["clusters"]) {
		name, _ := c["name"].(string)
		clusters[name] = true
	}
	for _, l := range list(sr["listeners"]) {
		for _, c := range list(l["filter_chains"]) {
			for _, f := range list(c["filters"]) {
				hcm, _ := f["typed_config"].(map[string]any)
				var names []string
				for _, h := range list(hcm["http_filters"]) {
					name, _ := h["name"].(string)
					names = append(names, name)
					if name != rateLimitFilter {
						continue
					}
					cfg, _ := h["typed_config"].(map[string]any)
					rls, _ := cfg["rate_limit_service"].(map[string]any)
					gs, _ := rls["grpc_service"].(map[string]any)
					eg, _ := gs["envoy_grpc"].(map[string]any)
					if cluster, _ := eg["cluster_name"].(string); !clusters[cluster] {
						errs = append(errs, fmt.Errorf("%s: listener %v: rate_limit_service cluster %q is not a cluster of the proxy (Envoy loads it anyway and fails every check at request time)", where, l["name"], cluster))
					}
				}
				i := slices.Index(names, rateLimitFilter)
				if i >= 0 && (i != len(names)-2 || names[len(names)-1] != routerFilter) {
					errs = append(errs, fmt.Errorf("%s: listener %v: HTTP filters %v: want %s right before %s, last", where, l["name"], names, rateLimitFilter, routerFilter))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// list returns the objects of a JSON list.
func list(v any) []map[string]any {
	var out []map[string]any
	items, _ := v.([]any)
	for _, e := range items {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// manifestVariant is a kustomize build: the base, or the base with
// components.
type manifestVariant struct {
	name       string
	components []string
}

// componentNeeds lists the components a component only works after.
var componentNeeds = map[string][]string{
	"components/sidecar-uds": {"components/sidecar"},
}

// manifestVariants are the base and, for every component under
// manifests/istio/components, the base with it (and what it needs).
func manifestVariants(t *testing.T) []manifestVariant {
	t.Helper()
	comps, err := shipped.Components(childproc.Root())
	if err != nil {
		t.Fatal(err)
	}
	out := []manifestVariant{{name: "base"}}
	for _, c := range comps {
		out = append(out, manifestVariant{name: filepath.Base(c), components: append(slices.Clone(componentNeeds[c]), c)})
	}
	return out
}

// renderVariant builds a variant of the manifests, with overrides.
func renderVariant(t *testing.T, v manifestVariant, overrides map[string][]byte) (rendered, error) {
	t.Helper()
	fsys, err := shipped.VariantFS(childproc.Root(), v.components, overrides)
	if err != nil {
		return rendered{}, err
	}
	out, err := shipped.KustomizeBuild(fsys, "/"+shipped.ManifestsDir)
	if err != nil {
		return rendered{}, err
	}
	return parseRendered("kustomize "+v.name, out)
}

// renderChart runs a plain helm template of the chart over a values set:
// no --kube-version, as CI pipelines and GitOps tools render it offline.
func renderChart(t *testing.T, values string) (rendered, error) {
	t.Helper()
	args := []string{"template", "envoy-rls", shipped.ChartDir, "--namespace", "envoy-rls"}
	if values != "" {
		args = append(args, "-f", values)
	}
	out, err := shipped.Helm(childproc.Root(), t.TempDir(), args...)
	if err != nil {
		return rendered{}, err
	}
	return parseRendered("helm template "+shipped.ValuesName(values), out)
}

// shippedBootstraps lists the repository's YAML files that hold an Envoy
// bootstrap (a top-level static_resources), outside bin/ and testdata/.
func shippedBootstraps(t *testing.T) []string {
	t.Helper()
	root := childproc.Root()
	var out []string
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case de.IsDir() && (rel == "bin" || rel == ".git" || de.Name() == "testdata" || de.Name() == "node_modules"):
			return filepath.SkipDir
		case de.IsDir(), !strings.HasSuffix(rel, ".yaml") && !strings.HasSuffix(rel, ".yml"):
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(data, []byte("static_resources:")) || bytes.Contains(data, []byte("\nstatic_resources:")) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(out, "envoy-config/envoy.yaml") {
		t.Fatalf("the bootstrap scan found %v, not envoy-config/envoy.yaml", out)
	}
	return out
}

func TestShippedBootstraps(t *testing.T) {
	root := childproc.Root()
	for _, rel := range shippedBootstraps(t) {
		t.Run(rel, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkBootstrap(t, rel, data); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkBootstrap has Envoy validate a complete bootstrap and checks its
// rate-limit filters as checkRateLimitFilters does.
func checkBootstrap(t *testing.T, where string, data []byte) error {
	t.Helper()
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var b map[string]any
	if err := json.Unmarshal(js, &b); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return errors.Join(envoytest.Validate(t, where, data), checkRateLimitFilters(where, b))
}

// guideBlocks returns the YAML blocks of the guides (README.md and
// docs/*.md) that hold a complete bootstrap or EnvoyFilter, by file.
func guideBlocks(t *testing.T) (bootstraps, filters map[string][]string) {
	t.Helper()
	root := childproc.Root()
	docs, err := shipped.Glob(root, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	bootstraps, filters = map[string][]string{}, map[string][]string{}
	for _, rel := range append([]string{"README.md"}, docs...) {
		md, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range shipped.YAMLBlocks(string(md)) {
			switch {
			case strings.Contains(b, "\nstatic_resources:") || strings.HasPrefix(b, "static_resources:"):
				bootstraps[rel] = append(bootstraps[rel], b)
			case strings.Contains(b, "kind: EnvoyFilter"):
				filters[rel] = append(filters[rel], b)
			}
		}
	}
	return bootstraps, filters
}

func TestGuideConfigs(t *testing.T) {
	bootstraps, filters := guideBlocks(t)
	// The guides' EnvoyFilters patch the proxies of the base install: its
	// Services are the clusters istiod would generate.
	base, err := renderVariant(t, manifestVariant{name: "base"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rel, blocks := range bootstraps {
		for i, b := range blocks {
			n++
			if err := checkBootstrap(t, fmt.Sprintf("%s-%d", rel, i), []byte(b)); err != nil {
				t.Errorf("%s: bootstrap block %d: %v", rel, i, err)
			}
		}
	}
	for rel, blocks := range filters {
		for i, b := range blocks {
			n++
			r, err := parseRendered(fmt.Sprintf("%s block %d", rel, i), []byte(b))
			if err != nil {
				t.Error(err)
				continue
			}
			r.services = base.services
			if err := checkFilters(t, fmt.Sprintf("%s-%d", rel, i), r); err != nil {
				t.Error(err)
			}
		}
	}
	// docs/deploying.md shows the Unix-socket sidecar's EnvoyFilter whole;
	// finding nothing means the block scan broke.
	if n == 0 {
		t.Fatal("no complete bootstrap or EnvoyFilter found in README.md or docs/*.md; docs/deploying.md has one")
	}
}

func TestKustomizeEnvoyFilters(t *testing.T) {
	for _, v := range manifestVariants(t) {
		t.Run(v.name, func(t *testing.T) {
			r, err := renderVariant(t, v, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.filters) == 0 {
				t.Fatal("the build holds no EnvoyFilter; the base has the gateway's")
			}
			if err := checkFilters(t, "kustomize-"+v.name, r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestChartEnvoyFilters(t *testing.T) {
	values, err := shipped.ChartValues(childproc.Root())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		t.Run(shipped.ValuesName(v), func(t *testing.T) {
			r, err := renderChart(t, v)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.filters) == 0 {
				t.Fatal("the chart rendered no EnvoyFilter; every values set enables the gateway's")
			}
			if err := checkFilters(t, "chart-"+shipped.ValuesName(v), r); err != nil {
				t.Fatal(err)
			}
		})
	}
}
