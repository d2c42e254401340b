package shipped

import (
	"reflect"
	"strings"
	"testing"
)

func TestYAMLBlocks(t *testing.T) {
	md := "# Guide\n\n```yaml\na: 1\n```\n\n1. In a list:\n\n   ```yaml\n   b:\n     c: 2\n   ```\n\n```sh\nnot: yaml\n```\n"
	got := YAMLBlocks(md)
	want := []string{"a: 1\n", "b:\n  c: 2\n"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("YAMLBlocks = %q, want %q", got, want)
	}
}

func TestWithComponents(t *testing.T) {
	k := []byte("resources:\n- a.yaml\n# components:\n# - components/x\n")
	got, err := WithComponents(k, "components/x", "components/y")
	if err != nil {
		t.Fatal(err)
	}
	if want := "resources:\n- a.yaml\ncomponents:\n- components/x\n- components/y\n"; string(got) != want {
		t.Fatalf("WithComponents = %q, want %q", got, want)
	}
	if _, err := WithComponents([]byte("resources: []\n"), "components/x"); err == nil || !strings.Contains(err.Error(), "# components:") {
		t.Fatalf("WithComponents without the commented block: %v, want an error naming it", err)
	}
}

func TestComponentsAndValues(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	comps, err := Components(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) == 0 || !strings.HasPrefix(comps[0], "components/") {
		t.Fatalf("Components = %v, want components/NAME entries", comps)
	}
	values, err := ChartValues(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(values) < 2 || values[0] != "" || ValuesName(values[0]) != "defaults" || !strings.HasPrefix(values[1], ChartDir+"/ci/") {
		t.Fatalf("ChartValues = %v, want the defaults then %s/ci/*.yaml", values, ChartDir)
	}
}
