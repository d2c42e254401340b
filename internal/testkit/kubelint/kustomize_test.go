package kubelint

import (
	"io/fs"
	"path"
	"strings"
	"testing"
)

// mapTree is a file tree in a map: directories are implied by the files
// below them.
type mapTree map[string]string

func (m mapTree) Stat(rel string) (isDir, ok bool) {
	if _, ok := m[rel]; ok {
		return false, true
	}
	for p := range m {
		if strings.HasPrefix(p, rel+"/") {
			return true, true
		}
	}
	return false, false
}

func (m mapTree) ReadFile(rel string) ([]byte, error) {
	if data, ok := m[rel]; ok {
		return []byte(data), nil
	}
	return nil, &fs.PathError{Op: "read", Path: rel, Err: fs.ErrNotExist}
}

const goodKustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- deployment.yaml
components:
- components/extra
configMapGenerator:
- name: rules
  files:
  - rules/edge.yaml
generatorOptions:
  disableNameSuffixHash: true
patches:
- path: patch.yaml
images:
- name: envoy-rls
  newTag: v1
`

func TestCheckKustomization(t *testing.T) {
	tree := func() mapTree {
		return mapTree{
			"deploy/deployment.yaml":                     "kind: Deployment\n",
			"deploy/components/extra/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
			"deploy/rules/edge.yaml":                     "domain: edge\n",
			"deploy/patch.yaml":                          "# one patch\nkind: Deployment\n",
		}
	}
	tests := []struct {
		name      string
		old, repl string            // applied to goodKustomization
		files     map[string]string // replacing files of the tree
		want      []string          // nil: valid
	}{
		{name: "good"},
		{name: "component", old: "v1beta1\nkind: Kustomization", repl: "v1alpha1\nkind: Component"},
		{name: "unknown field", old: "configMapGenerator:", repl: "configMapGenerators:",
			want: []string{"deploy/kustomization.yaml: ", `unknown field "configMapGenerators"`}},
		{name: "wrong apiVersion", old: "v1beta1", repl: "v1",
			want: []string{"deploy/kustomization.yaml: unexpected kustomize.config.k8s.io/v1 Kustomization"}},
		{name: "missing resource", old: "- deployment.yaml", repl: "- deployments.yaml",
			want: []string{`deploy/kustomization.yaml: resources entry "deployments.yaml" does not exist`}},
		{name: "component that is a file", old: "- components/extra", repl: "- deployment.yaml",
			want: []string{`components entry "deployment.yaml" is not a directory`}},
		{name: "missing generator file", old: "- rules/edge.yaml", repl: "- rules/edg.yaml",
			want: []string{`configMapGenerator rules entry "rules/edg.yaml" does not exist`}},
		{name: "missing patch", old: "- path: patch.yaml", repl: "- path: patches.yaml",
			want: []string{`patches entry "patches.yaml" does not exist`}},
		{name: "multi-document patch", files: map[string]string{"deploy/patch.yaml": "kind: A\n---\nkind: B\n"},
			want: []string{"deploy/kustomization.yaml: patch patch.yaml holds 2 documents, want 1 (older kustomize crashes on more)"}},
		{name: "patch target and generator options", old: "- path: patch.yaml", repl: "- path: patch.yaml\n  target: {group: apps, version: v1, kind: Deployment, name: app, namespace: default}"},
		{name: "generator options", old: "  - rules/edge.yaml\n", repl: "  - rules/edge.yaml\n  options: {disableNameSuffixHash: true}\n"},
		{name: "misspelt patch target", old: "- path: patch.yaml", repl: "- path: patch.yaml\n  target: {kind: Deployment, names: app}",
			want: []string{`unknown field "patches[0].target.names"`}},
		{name: "misspelt generator option", old: "  - rules/edge.yaml\n", repl: "  - rules/edge.yaml\n  options: {disableNameHash: true}\n",
			want: []string{`unknown field "configMapGenerator[0].options.disableNameHash"`}},
		{name: "not YAML", old: "resources:\n", repl: "resources: [\n", want: []string{"deploy/kustomization.yaml: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := goodKustomization
			if tc.old != "" {
				data = mutate(t, data, tc.old, tc.repl)
			}
			tr := tree()
			for k, v := range tc.files {
				tr[k] = v
			}
			err := CheckKustomization(path.Join("deploy", "kustomization.yaml"), []byte(data), tr)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			expectMentions(t, err, tc.want)
		})
	}
}
