package kubelint

import (
	"errors"
	"fmt"
	"path"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Kustomization is the subset of kustomize's Kustomization and Component
// that these checks understand; CheckKustomization decodes it strictly, so
// a field outside it fails, as kustomize would fail on a misspelt one.
type Kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Resources          []string `json:"resources,omitempty"`
	Components         []string `json:"components,omitempty"`
	ConfigMapGenerator []struct {
		Name      string   `json:"name"`
		Namespace string   `json:"namespace,omitempty"`
		Files     []string `json:"files,omitempty"`
		// Options is per generator, as a component needs it: the root's
		// generatorOptions do not reach a component's generators.
		Options *GeneratorOptions `json:"options,omitempty"`
	} `json:"configMapGenerator,omitempty"`
	GeneratorOptions *GeneratorOptions `json:"generatorOptions,omitempty"`
	Patches          []struct {
		Path string `json:"path"`
		// Target selects the objects a patch applies to; a JSON 6902
		// patch needs one, and a strategic-merge patch with one may match
		// nothing without failing the build.
		Target *struct {
			Group     string `json:"group,omitempty"`
			Version   string `json:"version,omitempty"`
			Kind      string `json:"kind,omitempty"`
			Name      string `json:"name,omitempty"`
			Namespace string `json:"namespace,omitempty"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// GeneratorOptions are the options of kustomize's generators that these
// checks understand.
type GeneratorOptions struct {
	DisableNameSuffixHash bool `json:"disableNameSuffixHash,omitempty"`
}

// Tree is the file tree a kustomization lives in, by slash-separated path.
type Tree interface {
	// Stat reports whether rel exists and whether it is a directory.
	Stat(rel string) (isDir, ok bool)
	ReadFile(rel string) ([]byte, error)
}

// CheckKustomization checks the kustomization.yaml at rel in tree, whose
// contents are data: it decodes strictly, every file and directory it
// names exists, and each patch file holds one document (kustomize releases
// before v5.6 crash on multi-document patch files).
func CheckKustomization(rel string, data []byte, tree Tree) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	var k Kustomization
	strict, err := kjson.UnmarshalStrict(js, &k)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	var p problems
	for _, e := range strict {
		p.add("%s: %w", rel, e)
	}
	switch {
	case k.Kind == "Kustomization" && k.APIVersion == "kustomize.config.k8s.io/v1beta1":
	case k.Kind == "Component" && k.APIVersion == "kustomize.config.k8s.io/v1alpha1":
	default:
		p.add("%s: unexpected %s %s", rel, k.APIVersion, k.Kind)
	}
	dir := path.Dir(rel)
	need := func(field, name string, wantDir bool) {
		switch isDir, ok := tree.Stat(path.Join(dir, name)); {
		case !ok:
			p.add("%s: %s entry %q does not exist", rel, field, name)
		case wantDir && !isDir:
			p.add("%s: %s entry %q is not a directory", rel, field, name)
		}
	}
	for _, r := range k.Resources {
		need("resources", r, false)
	}
	for _, c := range k.Components {
		need("components", c, true)
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			need("configMapGenerator "+g.Name, f, false)
		}
	}
	for _, patch := range k.Patches {
		need("patches", patch.Path, false)
		data, err := tree.ReadFile(path.Join(dir, patch.Path))
		if err != nil {
			continue
		}
		docs, err := SplitYAML(data)
		if err != nil {
			p.add("%s: patch %s: %w", rel, patch.Path, err)
		} else if len(docs) != 1 {
			p.add("%s: patch %s holds %d documents, want 1 (older kustomize crashes on more)", rel, patch.Path, len(docs))
		}
	}
	return errors.Join(p...)
}
