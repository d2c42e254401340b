package meshconfig

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// overrides replaces repository files (by slash-separated relative path)
// with other contents; the mutation test checks broken copies through it
// without writing to the tree.
type overrides map[string][]byte

func (o overrides) read(t testing.TB, rel string) []byte {
	t.Helper()
	if data, ok := o[rel]; ok {
		return data
	}
	return childproc.ReadRepoFile(t, rel)
}

// ruleFiles returns examples/config, with overrides applied.
func (o overrides) ruleFiles(t testing.TB) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, n := range repoGlob(t, "examples/config/*.y*ml") {
		files[n] = o.read(t, n)
	}
	return files
}

// manifestOverrides returns the overrides under manifests/istio.
func (o overrides) manifestOverrides() map[string][]byte {
	out := map[string][]byte{}
	for k, v := range o {
		if strings.HasPrefix(k, manifestsDir+"/") {
			out[k] = v
		}
	}
	return out
}

// A fileCheck validates one kind of shipped file, reading the repository
// through overrides, and returns every problem it finds.
type fileCheck func(t *testing.T, o overrides) error

// checkEnvoyConfigs validates every Envoy bootstrap and simulates its
// descriptors against examples/config.
func checkEnvoyConfigs(t *testing.T, o overrides) error {
	snap, err := loadRules(o.ruleFiles(t))
	if err != nil {
		return fmt.Errorf("examples/config: %w", err)
	}
	var errs []error
	minPing := serverKeepaliveMinTime(t)
	for _, name := range envoyConfigFiles(t) {
		b, proxies, err := loadBootstrap(name, o.read(t, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, checkRLSTransport(name, b, minPing))
		for _, p := range proxies {
			if p.filter == nil {
				continue
			}
			errs = append(errs, checkSamples(name+": "+p.where, p.filter, p.vhosts, snap, edgeSamples()))
		}
	}
	return errors.Join(errs...)
}

// checkManifests validates the kustomizations, builds the manifests with the
// sidecar component, decodes every object strictly, runs the cross-object
// checks, validates each EnvoyFilter and simulates its descriptors.
func checkManifests(t *testing.T, o overrides) error {
	_, errs := checkBuild(t, "manifests", variantFS(t, []string{"components/sidecar", versionsComponent}, o.manifestOverrides()), o)
	return errors.Join(errs...)
}

// checkBuild runs the checks every manifest build gets: the kustomizations,
// strict decoding of every object, the environment names (what names the
// build in messages), and each EnvoyFilter with its simulated descriptors.
// It returns the decoded objects, nil when the build or the rules failed,
// and every problem.
func checkBuild(t *testing.T, what string, fsys filesys.FileSystem, o overrides) (*kubelint.Objects, []error) {
	errs := checkKustomizations(fsys)
	ruleFiles := o.ruleFiles(t)
	objs, err := renderManifests(fsys, ruleFiles)
	if err != nil {
		return nil, append(errs, err)
	}
	errs = append(errs, checkEnvNames(what, objs.EnvNames(), envTwins(t)))
	snap, err := loadRules(ruleFiles)
	if err != nil {
		return nil, append(errs, err)
	}
	return objs, append(errs, checkEnvoyFilters(objs, snap)...)
}

// checkEnvoyFilters checks each EnvoyFilter of objs and simulates its
// descriptors for its domain's sample requests against snap.
func checkEnvoyFilters(objs *kubelint.Objects, snap *rules.Snapshot) []error {
	var errs []error
	for _, ef := range envoyFilters(objs) {
		p, err := checkEnvoyFilter(ef, objs.Services)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		samples, err := samplesFor(p.filter.GetDomain())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.where, err))
			continue
		}
		errs = append(errs, checkSamples(p.where, p.filter, p.vhosts, snap, samples))
	}
	return errs
}

// kustomizeTree is an in-memory manifests tree as kubelint reads it.
type kustomizeTree struct{ fsys filesys.FileSystem }

func (k kustomizeTree) Stat(rel string) (isDir, ok bool) {
	return k.fsys.IsDir("/" + rel), k.fsys.Exists("/" + rel)
}

func (k kustomizeTree) ReadFile(rel string) ([]byte, error) { return k.fsys.ReadFile("/" + rel) }

// checkKustomizations runs kubelint.CheckKustomization on every
// kustomization.yaml of an in-memory manifests tree.
func checkKustomizations(fsys filesys.FileSystem) []error {
	var errs []error
	var files []string
	err := fsys.Walk("/"+manifestsDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && path.Base(p) == "kustomization.yaml" {
			files = append(files, strings.TrimPrefix(filepath.ToSlash(p), "/"))
		}
		return err
	})
	if err != nil {
		return []error{err}
	}
	sort.Strings(files)
	for _, rel := range files {
		data, err := fsys.ReadFile("/" + rel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, kubelint.CheckKustomization(rel, data, kustomizeTree{fsys}))
	}
	return errs
}

// checkComposeSetup validates the compose file against the repository and
// the Envoy bootstrap it mounts.
func checkComposeSetup(t *testing.T, o overrides) error {
	c, err := parseCompose(o.read(t, composeRel))
	if err != nil {
		return err
	}
	return errors.Join(checkCompose(c, childproc.Root(), o.read(t, "envoy-config/envoy.yaml")),
		checkEnvNames(composeRel, c.envNames(), envTwins(t)))
}

// checkImageBuild validates the Dockerfile and .dockerignore.
func checkImageBuild(t *testing.T, o overrides) error {
	ignore, err := parseDockerIgnore(o.read(t, ".dockerignore"))
	if err != nil {
		return err
	}
	return checkDockerfile(o.read(t, "Dockerfile"), childproc.Root(), ignore)
}

// checkScripts runs shellcheck on the e2e scripts (copies, when
// overridden, in a temporary directory).
func checkScripts(t *testing.T, o overrides) error {
	bin, err := childproc.Tool{
		Name:    "shellcheck",
		Pinned:  []string{"/usr/bin/shellcheck"},
		Path:    []string{"shellcheck"},
		Install: "apt-get install shellcheck; make test does it",
	}.Find()
	if err != nil {
		return err
	}
	var errs []error
	for _, rel := range repoGlob(t, "test/e2e/*.sh") {
		dir := filepath.Join(childproc.Root(), filepath.Dir(filepath.FromSlash(rel)))
		if data, ok := o[rel]; ok {
			dir = t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, path.Base(rel)), data, 0o600); err != nil {
				return err
			}
		}
		cmd := exec.Command(bin, "--severity=style", "--external-sources", path.Base(rel))
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("shellcheck %s: %w\n%s", rel, err, out))
		}
	}
	return errors.Join(errs...)
}

// fileChecks names every check, for the baseline and the mutation test.
var fileChecks = map[string]fileCheck{
	"envoy":     checkEnvoyConfigs,
	"manifests": checkManifests,
	"compose":   checkComposeSetup,
	"image":     checkImageBuild,
	"scripts":   checkScripts,
	"uds":       checkSidecarUDS,
	"operator":  checkOperatorComponents,
}

// checkOperatorComponents builds the manifests with the Gateway API
// gateway, the NetworkPolicy and the autoscaler, and runs the manifests'
// checks on them.
func checkOperatorComponents(t *testing.T, o overrides) error {
	fsys := variantFS(t, []string{gatewayAPIComponent, networkPolicyComponent, hpaComponent}, o.manifestOverrides())
	_, errs := checkBuild(t, "manifests with the operator's components", fsys, o)
	return errors.Join(errs...)
}

// TestShippedFilesPassEveryCheck is the baseline of the mutation test: the
// files as shipped pass every check.
func TestShippedFilesPassEveryCheck(t *testing.T) {
	for name, check := range fileChecks {
		t.Run(name, func(t *testing.T) {
			if err := check(t, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
