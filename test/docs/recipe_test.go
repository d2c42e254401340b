package docs

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// recipe is a document's worked example of one Envoy configuration and the
// rule it feeds: blocks whose fence says recipe=NAME. A yaml block that
// starts with domain: is the recipe's rule file (served alone by
// envoy-rls), one that starts with virtual_hosts: is the Envoy side (it
// replaces the virtual hosts of examples/envoy/envoy.yaml's ingress
// listener), and a ```sh run recipe=NAME block sends requests through
// that Envoy.
type recipe struct {
	rules, virtualHosts string
}

// recipeName is the NAME of the fence's recipe=NAME word, or "".
func (f *fence) recipeName() string {
	for _, w := range f.info[1:] {
		if name, ok := strings.CutPrefix(w, "recipe="); ok {
			return name
		}
	}
	return ""
}

// recipesOf collects a document's recipes from its yaml blocks, failing t
// for a recipe block that is neither half or repeats one.
func recipesOf(t *testing.T, rel string, fences []*fence) map[string]recipe {
	t.Helper()
	out := map[string]recipe{}
	for _, f := range fences {
		if len(f.info) == 0 || f.info[0] != "yaml" {
			continue
		}
		name := f.recipeName()
		if name == "" {
			continue
		}
		r := out[name]
		text := strings.Join(f.lines, "\n") + "\n"
		switch first := firstYAMLLine(f.lines); {
		case strings.HasPrefix(first, "domain:") && r.rules == "":
			r.rules = text
		case strings.HasPrefix(first, "virtual_hosts:") && r.virtualHosts == "":
			r.virtualHosts = text
		default:
			t.Errorf("%s:%d: a yaml recipe=%s block must be the recipe's one rule file (domain: ...) or its one virtual_hosts:", rel, f.line, name)
		}
		out[name] = r
	}
	return out
}

// withVirtualHosts returns the bootstrap with the route configuration of
// its ingress listener's connection manager holding virtualHosts (YAML
// with one key, virtual_hosts) instead of its own.
func withVirtualHosts(bootstrap []byte, virtualHosts string) ([]byte, error) {
	var boot map[string]any
	if err := yaml.Unmarshal(bootstrap, &boot); err != nil {
		return nil, fmt.Errorf("examples/envoy/envoy.yaml: %w", err)
	}
	var vh map[string]any
	if err := yaml.Unmarshal([]byte(virtualHosts), &vh); err != nil {
		return nil, fmt.Errorf("the recipe's virtual_hosts: %w", err)
	}
	if len(vh) != 1 || vh["virtual_hosts"] == nil {
		return nil, fmt.Errorf("the recipe's Envoy block has keys %v, want only virtual_hosts", keys(vh))
	}
	sr, _ := boot["static_resources"].(map[string]any)
	listeners, _ := sr["listeners"].([]any)
	for _, l := range listeners {
		lm, _ := l.(map[string]any)
		if lm["name"] != "ingress" {
			continue
		}
		chains, _ := lm["filter_chains"].([]any)
		for _, c := range chains {
			filters, _ := c.(map[string]any)["filters"].([]any)
			for _, f := range filters {
				tc, _ := f.(map[string]any)["typed_config"].(map[string]any)
				rc, _ := tc["route_config"].(map[string]any)
				if rc == nil {
					continue
				}
				rc["virtual_hosts"] = vh["virtual_hosts"]
				return yaml.Marshal(boot)
			}
		}
	}
	return nil, fmt.Errorf("examples/envoy/envoy.yaml has no ingress listener with a route_config")
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
