package e2e

import (
	"fmt"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"sigs.k8s.io/yaml"
)

// shippedBootstrap parses envoy-config/envoy.yaml, for a test to derive a
// modified copy from the shipped file rather than write its own.
func shippedBootstrap(t testing.TB) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, "envoy-config/envoy.yaml"), &doc); err != nil {
		t.Fatalf("parse envoy-config/envoy.yaml: %v", err)
	}
	return doc
}

// encodeBootstrap is the inverse of shippedBootstrap, for stackOpts.Bootstrap.
func encodeBootstrap(t testing.TB, doc map[string]any) []byte {
	t.Helper()
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatalf("encode bootstrap: %v", err)
	}
	return b
}

// bootstrapPath walks doc along keys (map keys, or, for a list, the name of
// the element to take) and fails t when a step is missing, so a renamed
// listener or filter in the shipped file fails loudly.
func bootstrapPath(t testing.TB, doc map[string]any, keys ...string) map[string]any {
	t.Helper()
	cur := doc
	for i := 0; i < len(keys); i++ {
		v, ok := cur[keys[i]]
		if !ok {
			t.Fatalf("bootstrap: no %q at %v", keys[i], keys[:i])
		}
		if list, isList := v.([]any); isList {
			i++
			if i == len(keys) {
				t.Fatalf("bootstrap: %v is a list; name the element", keys[:i])
			}
			v = named(list, keys[i])
			if v == nil {
				t.Fatalf("bootstrap: no element named %q in %v", keys[i], keys[:i])
			}
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("bootstrap: %v is %T, not a map", keys[:i+1], v)
		}
		cur = m
	}
	return cur
}

func named(list []any, name string) any {
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && fmt.Sprint(m["name"]) == name {
			return m
		}
	}
	return nil
}

// The shipped listener's HTTP connection manager and its rate-limit filter.
func ingressHCM(t testing.TB, doc map[string]any) map[string]any {
	t.Helper()
	static := bootstrapPath(t, doc, "static_resources")
	ls := bootstrapPath(t, static, "listeners", "ingress")
	chains, _ := ls["filter_chains"].([]any)
	if len(chains) != 1 {
		t.Fatalf("bootstrap: listener ingress has %d filter chains, want 1", len(chains))
	}
	return bootstrapPath(t, chains[0].(map[string]any), "filters", "envoy.filters.network.http_connection_manager", "typed_config")
}

// rateLimitFilter is the typed_config of the listener's rate-limit filter.
func rateLimitFilter(t testing.TB, doc map[string]any) map[string]any {
	t.Helper()
	return bootstrapPath(t, ingressHCM(t, doc), "http_filters", "envoy.filters.http.ratelimit", "typed_config")
}

// cluster is the static cluster called name.
func cluster(t testing.TB, doc map[string]any, name string) map[string]any {
	t.Helper()
	return bootstrapPath(t, doc, "static_resources", "clusters", name)
}

// withFilter returns envoy.yaml with its rate-limit filter changed by edit.
func withFilter(t testing.TB, edit func(filter map[string]any)) []byte {
	t.Helper()
	doc := shippedBootstrap(t)
	edit(rateLimitFilter(t, doc))
	return encodeBootstrap(t, doc)
}

// patientTimeout replaces the filter's 0.25s in tests that are not about
// it: on a loaded test machine a call can take longer, and the shipped
// fail-open would turn that into an admitted request without rate-limit
// headers, which such a test would misread as a wrong decision.
const patientTimeout = "5s"

// patient sets the filter's timeout to patientTimeout.
func patient(filter map[string]any) { filter["timeout"] = patientTimeout }
