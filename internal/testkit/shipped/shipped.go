// Package shipped renders, for tests, what the repository ships into a
// mesh: builds of the kustomize tree manifests/istio with chosen components
// (in memory, with files overridden), `helm template` of the chart
// charts/envoy-rls over its values sets, and the fenced YAML blocks of the
// guides. Each caller then checks the result its own way (test/meshconfig
// with the Go types, test/istio with a real istiod and Envoys).
//
// It reads the repository and runs helm; it writes nothing outside the
// directory its callers give helm as its home, and it never touches the
// tree it reads. It must not be imported by non-test code.
package shipped

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The shipped trees, relative to the repository root.
const (
	// ManifestsDir is the kustomization root.
	ManifestsDir = "manifests/istio"
	// ChartDir is the Helm chart.
	ChartDir = "charts/envoy-rls"
)

// Root returns the repository root: this package lives in internal/testkit/shipped.
func Root() (string, error) {
	root := childproc.Root()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("shipped: repository root %s has no go.mod: %w", root, err)
	}
	return root, nil
}

// Glob lists the files under root matching pattern (slash-separated,
// relative to root), sorted and relative to root. No match is an error, so
// a moved directory cannot leave a check with nothing to check.
func Glob(root, pattern string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
	if err != nil {
		return nil, fmt.Errorf("shipped: glob %s: %w", pattern, err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("shipped: no file matches %s", pattern)
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			return nil, fmt.Errorf("shipped: %w", err)
		}
		out[i] = filepath.ToSlash(rel)
	}
	sort.Strings(out)
	return out, nil
}

// Components lists the kustomize components under ManifestsDir/components,
// as the root kustomization names them ("components/sidecar").
func Components(root string) ([]string, error) {
	dirs, err := Glob(root, ManifestsDir+"/components/*/kustomization.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = strings.TrimPrefix(filepath.ToSlash(filepath.Dir(d)), ManifestsDir+"/")
	}
	return out, nil
}

// ManifestFS copies ManifestsDir into an in-memory file system (at the same
// relative path, under /), replacing the files named in overrides (by
// slash-separated path relative to root). Builds of variants and of broken
// copies use it, so the real tree is never written.
func ManifestFS(root string, overrides map[string][]byte) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(filepath.Join(root, ManifestsDir), func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile("/"+filepath.ToSlash(rel), data)
	})
	if err != nil {
		return nil, fmt.Errorf("shipped: copy %s: %w", ManifestsDir, err)
	}
	for rel, data := range overrides {
		if err := mem.WriteFile("/"+rel, data); err != nil {
			return nil, fmt.Errorf("shipped: override %s: %w", rel, err)
		}
	}
	return mem, nil
}

// commentedComponents starts the root kustomization's commented-out
// components list, which WithComponents replaces.
const commentedComponents = "# components:\n"

// WithComponents returns the root kustomization with its commented-out
// components list replaced by the given components.
func WithComponents(kustomization []byte, components ...string) ([]byte, error) {
	i := bytes.Index(kustomization, []byte(commentedComponents))
	if i < 0 {
		return nil, fmt.Errorf("shipped: %s/kustomization.yaml has no %q block to enable components in", ManifestsDir, strings.TrimSpace(commentedComponents))
	}
	out := append([]byte{}, kustomization[:i]...)
	out = append(out, "components:\n"...)
	for _, c := range components {
		out = append(out, "- "+c+"\n"...)
	}
	return out, nil
}

// VariantFS returns the manifests, with overrides, and the given components
// enabled in the root kustomization (none: the root as shipped).
func VariantFS(root string, components []string, overrides map[string][]byte) (filesys.FileSystem, error) {
	all := map[string][]byte{}
	for k, v := range overrides {
		all[k] = v
	}
	if components != nil {
		rel := ManifestsDir + "/kustomization.yaml"
		base, ok := all[rel]
		if !ok {
			var err error
			if base, err = os.ReadFile(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
				return nil, fmt.Errorf("shipped: %w", err)
			}
		}
		k, err := WithComponents(base, components...)
		if err != nil {
			return nil, err
		}
		all[rel] = k
	}
	return ManifestFS(root, all)
}

// KustomizeBuild runs kustomize (the library kubectl embeds) on dir of fsys
// and returns the multi-document YAML it renders.
func KustomizeBuild(fsys filesys.FileSystem, dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}

// HelmBin returns helm: $HELM_BIN, else bin/tools/helm (make test-deps
// builds it there), else helm on PATH.
func HelmBin() (string, error) { return HelmTool.Find() }

// HelmTool is helm under the kit's tool policy (childproc.Tool).
var HelmTool = childproc.Tool{
	Name:    "shipped: helm",
	Env:     "HELM_BIN",
	Pinned:  []string{"bin/tools/helm"},
	Path:    []string{"helm"},
	Install: "run make test-deps, which builds helm into bin/tools",
}

// Helm runs helm in root with args and returns its standard output. home
// is helm's config, cache and data directory (a temporary one: no user's
// settings or repositories; the chart has no dependencies).
func Helm(root, home string, args ...string) ([]byte, error) {
	bin, err := HelmBin()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// ChartValues lists the chart's values sets: "" for its defaults, then
// every file of ChartDir/ci (relative to root).
func ChartValues(root string) ([]string, error) {
	files, err := Glob(root, ChartDir+"/ci/*.yaml")
	if err != nil {
		return nil, err
	}
	return append([]string{""}, files...), nil
}

// ValuesName names a values set in messages and subtests: "defaults", or
// the file's base name without .yaml.
func ValuesName(values string) string {
	if values == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(values), ".yaml")
}

// YAMLBlocks returns the ```yaml blocks of a markdown text, in order,
// without the indentation of the list item they sit in.
func YAMLBlocks(md string) []string {
	var blocks []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml" {
			continue
		}
		indent := lines[i][:strings.Index(lines[i], "```")]
		var b strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.WriteString(strings.TrimPrefix(lines[i], indent))
			b.WriteByte('\n')
		}
		blocks = append(blocks, b.String())
	}
	return blocks
}
