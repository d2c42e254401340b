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

	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

const (
	rateLimitFilter = "envoy.filters.http.ratelimit"
	routerFilter    = "envoy.filters.http.router"
)

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := shipped.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
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
