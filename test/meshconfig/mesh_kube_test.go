package meshconfig

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// manifestsDir is the kustomization root, relative to the repository.
const manifestsDir = shipped.ManifestsDir

// newKubeDecoder returns kubelint's strict decoder, taught Istio's
// EnvoyFilter (decoded here, with the Envoy types of its patches).
func newKubeDecoder() (*kubelint.Decoder, error) {
	return kubelint.NewDecoder(map[metav1.TypeMeta]kubelint.DecodeFunc{
		{APIVersion: "networking.istio.io/v1alpha3", Kind: "EnvoyFilter"}: func(where string, doc []byte) (any, metav1.ObjectMeta, error) {
			ef, err := decodeEnvoyFilter(where, doc)
			if err != nil {
				return nil, metav1.ObjectMeta{}, err
			}
			return ef, ef.meta, nil
		},
	})
}

// envoyFilters returns the EnvoyFilters among objs, in document order.
func envoyFilters(objs *kubelint.Objects) []*envoyFilterDoc {
	var out []*envoyFilterDoc
	for _, o := range objs.Others {
		if ef, ok := o.Value.(*envoyFilterDoc); ok {
			out = append(out, ef)
		}
	}
	return out
}

// manifestFS copies manifests/istio into an in-memory file system (at the
// same relative path), replacing the files named in overrides. Mutation
// tests and variant builds use it so the real tree is never written.
func manifestFS(t testing.TB, overrides map[string][]byte) filesys.FileSystem {
	t.Helper()
	fsys, err := shipped.ManifestFS(childproc.Root(), overrides)
	if err != nil {
		t.Fatalf("meshconfig: %v", err)
	}
	return fsys
}

// renderManifests builds the kustomization in fsys, decodes every object
// strictly and runs kubelint's checks. ruleFiles are the rules the
// ConfigMap must hold (examples/config).
func renderManifests(fsys filesys.FileSystem, ruleFiles map[string][]byte) (*kubelint.Objects, error) {
	out, err := shipped.KustomizeBuild(fsys, "/"+manifestsDir)
	if err != nil {
		return nil, err
	}
	dec, err := newKubeDecoder()
	if err != nil {
		return nil, err
	}
	objs := &kubelint.Objects{}
	if err := dec.DecodeStream("kustomize build "+manifestsDir, out, objs); err != nil {
		return nil, err
	}
	err = kubelint.Check(objs, kubelint.Options{
		// Istio's and the sample workload's.
		ExternalNamespaces: []string{"istio-system", "default"},
		Rules: kubelint.Rules{
			Files:   ruleFiles,
			Source:  "examples/config",
			CopyDir: manifestsDir + "/rules",
			Validate: func(files map[string][]byte) error {
				_, err := loadRules(files)
				return err
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return objs, nil
}

func TestKustomizationsReferenceExistingFiles(t *testing.T) {
	errs := checkKustomizations(manifestFS(t, nil))
	if len(errs) < 4 {
		t.Fatalf("checked %d kustomization.yaml files under %s, want the root and its 3 components", len(errs), manifestsDir)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// manifestVariants are the kustomize builds users can choose: the root
// as shipped, and with each optional component enabled.
var manifestVariants = []struct {
	name       string
	components []string
}{
	{"default", nil},
	{"sidecar", []string{"components/sidecar"}},
	{"sidecar-uds", []string{"components/sidecar", udsComponent}},
	{"managed-redis", []string{"components/managed-redis"}},
	{"per-version", []string{versionsComponent}},
	{"gateway-helm", []string{gatewayHelmComponent}},
	{"gateway-api", []string{gatewayAPIComponent}},
	{"network-policy", []string{networkPolicyComponent}},
	{"hpa", []string{hpaComponent}},
	{"monitoring", []string{monitoringComponent}},
	{"all", []string{"components/sidecar", udsComponent, "components/managed-redis", versionsComponent, networkPolicyComponent, hpaComponent, monitoringComponent}},
}

// variantFS returns the manifests with the variant's components enabled.
func variantFS(t testing.TB, components []string, overrides map[string][]byte) filesys.FileSystem {
	t.Helper()
	fsys, err := shipped.VariantFS(childproc.Root(), components, overrides)
	if err != nil {
		t.Fatalf("meshconfig: %v", err)
	}
	return fsys
}

func TestManifestsBuildAndDecodeStrictly(t *testing.T) {
	ruleFiles := exampleRuleFiles(t)
	for _, v := range manifestVariants {
		t.Run(v.name, func(t *testing.T) {
			objs, err := renderManifests(variantFS(t, v.components, nil), ruleFiles)
			if err != nil {
				t.Fatal(err)
			}
			refs := objs.Refs()
			sidecar := slices.Contains(v.components, "components/sidecar")
			managed := slices.Contains(v.components, "components/managed-redis")
			uds := slices.Contains(v.components, udsComponent)
			versions := slices.Contains(v.components, versionsComponent)
			for _, want := range []struct {
				kind, ns, name string
				present        bool
			}{
				{"Namespace", "", "envoy-rls", true},
				{"Deployment", "envoy-rls", "envoy-rls", true},
				{"Service", "envoy-rls", "envoy-rls", true},
				{"PodDisruptionBudget", "envoy-rls", "envoy-rls", true},
				{"NetworkPolicy", "envoy-rls", "envoy-rls", slices.Contains(v.components, networkPolicyComponent)},
				{"HorizontalPodAutoscaler", "envoy-rls", "envoy-rls", slices.Contains(v.components, hpaComponent)},
				{"ServiceMonitor", "envoy-rls", "envoy-rls", slices.Contains(v.components, monitoringComponent)},
				{"PrometheusRule", "envoy-rls", "envoy-rls", slices.Contains(v.components, monitoringComponent)},
				{"Gateway", "istio-system", "edge", slices.Contains(v.components, gatewayAPIComponent)},
				{"HTTPRoute", "default", "edge", slices.Contains(v.components, gatewayAPIComponent)},
				{"ConfigMap", "envoy-rls", "envoy-rls-config", true},
				{"EnvoyFilter", "istio-system", "envoy-rls-gateway", true},
				{"EnvoyFilter", "default", "envoy-rls-sidecar", sidecar},
				{"EnvoyFilter", "default", "envoy-rls-versions", versions},
				{"ConfigMap", "default", "envoy-rls-config", uds},
				{"Deployment", "envoy-rls", "redis", !managed},
				{"Service", "envoy-rls", "redis", !managed},
			} {
				if got := slices.Contains(refs, kubelint.Ref{Kind: want.kind, Namespace: want.ns, Name: want.name}); got != want.present {
					t.Errorf("%s %s/%s present = %v, want %v", want.kind, want.ns, want.name, got, want.present)
				}
			}
			if managed {
				e := objs.Env("envoy-rls", "ENVOY_RLS_REDIS_URL")
				if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.Value != "" {
					t.Errorf("managed-redis: ENVOY_RLS_REDIS_URL = %+v, want only a secretKeyRef", e)
				}
			}
		})
	}
}

// TestManifestFilesDecodeStrictly decodes each resource file on its own, so
// that a problem is reported against the file that has it.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	dec, err := newKubeDecoder()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range manifestResourceFiles(t) {
		t.Run(rel, func(t *testing.T) {
			objs := &kubelint.Objects{}
			if err := dec.DecodeStream(rel, childproc.ReadRepoFile(t, rel), objs); err != nil {
				t.Fatal(err)
			}
			if len(objs.Refs()) == 0 {
				t.Fatalf("%s holds no object", rel)
			}
		})
	}
}

// manifestResourceFiles lists the YAML files under manifests/istio that hold
// whole objects: not kustomizations, rule files or the patches a
// kustomization names.
func manifestResourceFiles(t *testing.T) []string {
	t.Helper()
	root := childproc.Root()
	var kustomizations, yamls []string
	err := filepath.WalkDir(filepath.Join(root, manifestsDir), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case de.IsDir() && de.Name() == "rules":
			return filepath.SkipDir
		case de.IsDir(), !strings.HasSuffix(de.Name(), ".yaml"):
		case de.Name() == "kustomization.yaml":
			kustomizations = append(kustomizations, rel)
		default:
			yamls = append(yamls, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	patches := map[string]bool{}
	for _, rel := range kustomizations {
		var k kubelint.Kustomization
		if err := yaml.Unmarshal(childproc.ReadRepoFile(t, rel), &k); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, p := range k.Patches {
			patches[path.Join(path.Dir(rel), p.Path)] = true
		}
	}
	var out []string
	for _, rel := range yamls {
		if !patches[rel] {
			out = append(out, rel)
		}
	}
	if len(out) < 6 {
		t.Fatalf("found only %d manifest files under %s: %v", len(out), manifestsDir, out)
	}
	return out
}
