package meshconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// The Helm chart and the values files its tests render: the chart's
// defaults, then every file of chartDir/ci.
const (
	chartDir = shipped.ChartDir
	// chartKubeVersion is the Kubernetes version templates are linted and
	// rendered for: one where every field the chart writes is GA (the
	// PDB's unhealthyPodEvictionPolicy since 1.31). TestHelmTemplateOffline
	// renders without one.
	chartKubeVersion = "1.31.0"
	// chartRelease names the objects envoy-rls, as the kustomize base does.
	chartRelease   = "envoy-rls"
	chartNamespace = "envoy-rls"
)

// chartValues lists the values files of the matrix ("" for the defaults).
func chartValues(t testing.TB) []string {
	t.Helper()
	v, err := shipped.ChartValues(childproc.Root())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// helm runs helm in the repository root and returns its standard output.
func helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return shipped.Helm(childproc.Root(), t.TempDir(), args...)
}

// valuesArgs are the -f flag for a values file, and the example rules as
// the chart's inline rule files (each file by its base name).
func valuesArgs(t testing.TB, values string) []string {
	t.Helper()
	var args []string
	if values != "" {
		args = append(args, "-f", values)
	}
	for _, f := range repoGlob(t, "examples/config/*.y*ml") {
		key := strings.ReplaceAll(path.Base(f), ".", `\.`)
		args = append(args, "--set-file", "rules.files."+key+"="+f)
	}
	return args
}

func TestHelmLint(t *testing.T) {
	for _, v := range chartValues(t) {
		t.Run(cmpName(v), func(t *testing.T) {
			args := append([]string{"lint", chartDir, "--strict", "--kube-version", chartKubeVersion, "--namespace", chartNamespace}, valuesArgs(t, v)...)
			if _, err := helm(t, args...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHelmTemplateOffline: the chart renders with a plain `helm template`,
// no --kube-version and no values, as CI pipelines and GitOps tools run it
// offline (helm's own default version, v1.20.0 for a go-installed helm,
// once failed the chart's kubeVersion), and it still renders the PDB's
// unhealthyPodEvictionPolicy.
func TestHelmTemplateOffline(t *testing.T) {
	out, err := helm(t, "template", chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("unhealthyPodEvictionPolicy: AlwaysAllow")) {
		t.Fatalf("the offline render has no PDB unhealthyPodEvictionPolicy:\n%s", out)
	}
}

// TestHelmNotesWarnOldKubernetes: where the chart's kubeVersion used to
// refuse a cluster older than 1.27, the install notes warn that its API
// server drops the PDB's unhealthyPodEvictionPolicy. helm template does
// not print NOTES.txt, so a copy of the chart renders it into a probe
// ConfigMap.
func TestHelmNotesWarnOldKubernetes(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "envoy-rls")
	if err := os.CopyFS(chart, os.DirFS(filepath.Join(childproc.Root(), chartDir))); err != nil {
		t.Fatal(err)
	}
	probe := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-probe}\ndata:\n  notes: |\n{{ include \"envoy-rls/templates/NOTES.txt\" . | indent 4 }}\n"
	if err := os.WriteFile(filepath.Join(chart, "templates", "notes-probe.yaml"), []byte(probe), 0o600); err != nil {
		t.Fatal(err)
	}
	const warning = "WARNING: Kubernetes v1.26.0 is older than 1.27"
	for _, tc := range []struct {
		version string
		args    []string
		warn    bool
	}{
		{"1.26.0", nil, true},
		{"1.26.0", []string{"--set", "podDisruptionBudget.enabled=false"}, false},
		{"1.27.0", nil, false},
		{"1.31.0", nil, false},
	} {
		args := append([]string{"template", chart, "--kube-version", tc.version, "--show-only", "templates/notes-probe.yaml"}, tc.args...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(out, []byte("WARNING: Kubernetes")); got != tc.warn {
			t.Errorf("Kubernetes %s %v: notes warn = %v, want %v:\n%s", tc.version, tc.args, got, tc.warn, out)
		}
		if tc.warn && !bytes.Contains(out, []byte(warning)) {
			t.Errorf("Kubernetes %s: the warning does not read %q:\n%s", tc.version, warning, out)
		}
	}
}

func cmpName(values string) string { return shipped.ValuesName(values) }

// chartValuesFile is the part of a values file the checks need.
type chartValuesFile struct {
	Rules struct {
		ExistingConfigMap string `json:"existingConfigMap"`
	} `json:"rules"`
	Redis struct {
		Addresses []string `json:"addresses"`
	} `json:"redis"`
}

// readValues reads the chart's defaults overlaid with values.
func readValues(t testing.TB, values string) chartValuesFile {
	t.Helper()
	var v chartValuesFile
	for _, f := range []string{chartDir + "/values.yaml", values} {
		if f == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(childproc.Root(), filepath.FromSlash(f)))
		if filepath.IsAbs(f) {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			t.Fatal(err)
		}
		var layer chartValuesFile
		if err := yaml.Unmarshal(data, &layer); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if layer.Rules.ExistingConfigMap != "" {
			v.Rules = layer.Rules
		}
		if layer.Redis.Addresses != nil {
			v.Redis.Addresses = layer.Redis.Addresses
		}
	}
	return v
}

// renderChart runs helm template with a values file and checks the output
// as the kustomize build is checked: every object decoded strictly,
// kubelint's checks with the example rules, the environment names against
// the binary's flags, and each EnvoyFilter into Istio's and Envoy's types
// with its descriptors simulated against the example rules.
func renderChart(t *testing.T, values string) (*kubelint.Objects, error) {
	t.Helper()
	args := append([]string{"template", chartRelease, chartDir, "--namespace", chartNamespace, "--kube-version", chartKubeVersion,
		"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "networking.istio.io/v1alpha3"}, valuesArgs(t, values)...)
	out, err := helm(t, args...)
	if err != nil {
		return nil, err
	}
	v := readValues(t, values)
	ruleFiles := exampleRuleFiles(t)
	if name := v.Rules.ExistingConfigMap; name != "" {
		out = append(out, userConfigMap(t, name, ruleFiles)...)
	}
	dec, err := newKubeDecoder()
	if err != nil {
		return nil, err
	}
	objs := &kubelint.Objects{}
	where := "helm template " + cmpName(values)
	if err := dec.DecodeStream(where, out, objs); err != nil {
		return nil, err
	}
	errs := []error{kubelint.Check(objs, kubelint.Options{
		ExternalNamespaces: []string{chartNamespace, "istio-system", "istio-ingress", "edge", "default"},
		ExternalHosts:      v.Redis.Addresses,
		Rules: kubelint.Rules{
			Files: ruleFiles, Source: "examples/config", CopyDir: "the chart's rules.files",
			Validate: func(files map[string][]byte) error { _, err := loadRules(files); return err },
		},
	})}
	errs = append(errs, checkEnvNames(where, objs.EnvNames(), envTwins(t)))
	snap, err := loadRules(ruleFiles)
	if err != nil {
		return nil, err
	}
	errs = append(errs, checkEnvoyFilters(objs, snap)...)
	return objs, errors.Join(errs...)
}

// userConfigMap is the rules ConfigMap a user manages beside the chart
// (rules.existingConfigMap), holding the example rules.
func userConfigMap(t testing.TB, name string, files map[string][]byte) []byte {
	t.Helper()
	cm := corev1.ConfigMap{Data: map[string]string{}}
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	cm.Name, cm.Namespace = name, chartNamespace
	for f, data := range files {
		cm.Data[path.Base(f)] = string(data)
	}
	out, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("\n---\n"), out...)
}

// chartExpect says what each values file of the matrix must render, beyond
// passing the checks; a values file without an entry fails the test, so
// the matrix and this table stay in step.
var chartExpect = map[string]func(objs *kubelint.Objects) error{
	"defaults": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantKinds(objs, "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "EnvoyFilter"),
			wantNoKinds(objs, "HorizontalPodAutoscaler", "NetworkPolicy", "ServiceMonitor", "PodMonitor", "PrometheusRule"),
			wantEnv(objs, "ENVOY_RLS_REDIS_URL", "redis://redis-master.redis.svc.cluster.local:6379/0"),
			wantEnv(objs, "ENVOY_RLS_DEBUG_ADDR", "127.0.0.1:6070"),
			wantEnv(objs, "ENVOY_RLS_LEASE_TTL", "200ms"),
			wantReplicas(objs, 2))
	},
	"standalone-tls-values": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantKinds(objs, "HorizontalPodAutoscaler", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"),
			wantEnvoyFilters(objs, "envoy-rls-gateway", "envoy-rls-sidecar"),
			wantEnv(objs, "ENVOY_RLS_REDIS_URL", "rediss://envoy-rls:$(RLS_REDIS_PASSWORD)@redis.example.internal:6380/2"),
			wantEnvBefore(objs, "RLS_REDIS_PASSWORD", "ENVOY_RLS_REDIS_URL"),
			wantEnv(objs, "ENVOY_RLS_REDIS_TLS_CERT", "/etc/envoy-rls/redis-tls/tls.crt"),
			wantEnv(objs, "ENVOY_RLS_GRPC_TLS_CLIENT_CA", "/etc/envoy-rls/grpc-client-ca/ca.crt"),
			wantEnv(objs, "ENVOY_RLS_ADMIN_TOKEN_FILE", "/etc/envoy-rls/admin/token"),
			wantEnv(objs, "ENVOY_RLS_REDIS_FAILURE_MODE", "allow"),
			wantReplicas(objs, 0))
	},
	"sentinel-values": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantKinds(objs, "PodMonitor", "NetworkPolicy"),
			wantEnv(objs, "ENVOY_RLS_REDIS_URL", "redis+sentinel://:$(RLS_REDIS_PASSWORD)@sentinel-0.redis.svc.cluster.local:26379,sentinel-1.redis.svc.cluster.local:26379,sentinel-2.redis.svc.cluster.local:26379/rls/0"),
			wantEnv(objs, "ENVOY_RLS_LEASE_HOT_RPS", "50"),
			wantGatewaySelector(objs, map[string]string{"istio": "ingress"}),
			wantReplicas(objs, 3))
	},
	"cluster-values": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantEnv(objs, "ENVOY_RLS_REDIS_URL", "rediss+cluster://redis-cluster-0.redis.svc.cluster.local:6379,redis-cluster-1.redis.svc.cluster.local:6379"),
			wantEnv(objs, "ENVOY_RLS_REDIS_TLS_CA", "/etc/envoy-rls/redis-tls/ca.crt"),
			wantEnv(objs, "ENVOY_RLS_REDIS_FAILURE_MODE", "local"),
			wantEnv(objs, "ENVOY_RLS_EXPECTED_REPLICAS", "4"),
			wantGatewaySelector(objs, map[string]string{"app": "edge-gateway"}))
	},
	"existing-config-values": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantNoKinds(objs, "PodDisruptionBudget"),
			wantEnv(objs, "ENVOY_RLS_DEBUG_ADDR", ""),
			wantSecretURL(objs, "envoy-rls-redis", "url"))
	},
	"xds-values": func(objs *kubelint.Objects) error {
		return errors.Join(
			wantEnv(objs, "ENVOY_RLS_CONFIG_SOURCE", "xds"),
			wantEnv(objs, "ENVOY_RLS_XDS_TLS_KEY", "/etc/envoy-rls/xds-tls/tls.key"),
			wantEnv(objs, "ENVOY_RLS_XDS_TLS_SAN", "rls-control-plane"),
			wantNoEnv(objs, "ENVOY_RLS_REDIS_URL"),
			wantNoKinds(objs, "ConfigMap"),
			wantGatewayTarget(objs, "istio-ingress", "edge"))
	},
}

func TestHelmTemplate(t *testing.T) {
	for _, v := range chartValues(t) {
		t.Run(cmpName(v), func(t *testing.T) {
			objs, err := renderChart(t, v)
			if err != nil {
				t.Fatal(err)
			}
			expect, ok := chartExpect[cmpName(v)]
			if !ok {
				t.Fatalf("%s has no entry in chartExpect: say what it must render", v)
			}
			if err := expect(objs); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestHelmMatchesKustomize: with the defaults, the chart's gateway
// EnvoyFilter and its sidecar one (enabled, for the same workload) patch
// the proxies exactly as the kustomize base and its sidecar component do.
func TestHelmMatchesKustomize(t *testing.T) {
	kust, err := renderManifests(variantFS(t, []string{"components/sidecar"}, nil), exampleRuleFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	values := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(values, []byte("istio: {sidecar: {enabled: true}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chart, err := renderChart(t, values)
	if err != nil {
		t.Fatal(err)
	}
	byCtx := func(objs *kubelint.Objects) map[string]*envoyFilterDoc {
		out := map[string]*envoyFilterDoc{}
		for _, ef := range envoyFilters(objs) {
			out[ef.spec.GetConfigPatches()[0].GetMatch().GetContext().String()] = ef
		}
		return out
	}
	want, got := byCtx(kust), byCtx(chart)
	if len(want) != 2 {
		t.Fatalf("kustomize rendered EnvoyFilters for %d contexts, want 2", len(want))
	}
	for ctx, w := range want {
		g, ok := got[ctx]
		switch {
		case !ok:
			t.Errorf("the chart renders no %s EnvoyFilter", ctx)
		case !proto.Equal(w.spec, g.spec):
			t.Errorf("%s EnvoyFilter: the chart's spec differs from manifests/istio's:\nchart: %v\nkustomize: %v", ctx, g.spec, w.spec)
		}
	}
}

func wantKinds(objs *kubelint.Objects, kinds ...string) error {
	var errs []error
	for _, k := range kinds {
		if !slices.ContainsFunc(objs.Refs(), func(r kubelint.Ref) bool { return r.Kind == k }) {
			errs = append(errs, fmt.Errorf("no %s rendered", k))
		}
	}
	return errors.Join(errs...)
}

func wantNoKinds(objs *kubelint.Objects, kinds ...string) error {
	var errs []error
	for _, r := range objs.Refs() {
		if slices.Contains(kinds, r.Kind) {
			errs = append(errs, fmt.Errorf("%s %s/%s rendered, want none", r.Kind, r.Namespace, r.Name))
		}
	}
	return errors.Join(errs...)
}

func wantEnv(objs *kubelint.Objects, name, value string) error {
	e := objs.Env(chartRelease, name)
	switch {
	case e == nil:
		return fmt.Errorf("env %s is not set, want %q", name, value)
	case e.Value != value || e.ValueFrom != nil:
		return fmt.Errorf("env %s = %q (from %v), want %q", name, e.Value, e.ValueFrom, value)
	}
	return nil
}

func wantNoEnv(objs *kubelint.Objects, name string) error {
	if e := objs.Env(chartRelease, name); e != nil {
		return fmt.Errorf("env %s is set (%q), want it unset", name, e.Value)
	}
	return nil
}

func wantSecretURL(objs *kubelint.Objects, secret, key string) error {
	e := objs.Env(chartRelease, "ENVOY_RLS_REDIS_URL")
	if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
		return fmt.Errorf("ENVOY_RLS_REDIS_URL = %+v, want only the secretKeyRef %s/%s", e, secret, key)
	}
	return nil
}

// wantEnvBefore: Kubernetes expands $(first) in later's value only when
// first is defined before it.
func wantEnvBefore(objs *kubelint.Objects, first, later string) error {
	names := objs.EnvNames()
	i, j := slices.Index(names, first), slices.Index(names, later)
	if i < 0 || j < 0 || i > j {
		return fmt.Errorf("env %s must come before %s (at %d and %d), or Kubernetes does not expand it", first, later, i, j)
	}
	return nil
}

func wantReplicas(objs *kubelint.Objects, n int32) error {
	for _, d := range objs.Deployments {
		got := int32(0)
		if d.Spec.Replicas != nil {
			got = *d.Spec.Replicas
		}
		if got != n {
			return fmt.Errorf("Deployment %s: replicas %d, want %d (0: left to the autoscaler)", d.Name, got, n)
		}
	}
	return nil
}

func gatewayFilter(objs *kubelint.Objects) *envoyFilterDoc {
	for _, ef := range envoyFilters(objs) {
		if ef.meta.Name == chartRelease+"-gateway" {
			return ef
		}
	}
	return nil
}

func wantGatewaySelector(objs *kubelint.Objects, labels map[string]string) error {
	ef := gatewayFilter(objs)
	if ef == nil {
		return errors.New("no gateway EnvoyFilter")
	}
	if got := ef.spec.GetWorkloadSelector().GetLabels(); fmt.Sprint(got) != fmt.Sprint(labels) {
		return fmt.Errorf("gateway EnvoyFilter selects %v, want %v", got, labels)
	}
	return nil
}

func wantGatewayTarget(objs *kubelint.Objects, ns, gateway string) error {
	ef := gatewayFilter(objs)
	if ef == nil {
		return errors.New("no gateway EnvoyFilter")
	}
	refs := ef.spec.GetTargetRefs()
	if ef.meta.Namespace != ns || len(refs) != 1 || refs[0].GetName() != gateway {
		return fmt.Errorf("gateway EnvoyFilter in %s targets %v, want Gateway %s/%s", ef.meta.Namespace, refs, ns, gateway)
	}
	return nil
}

func wantEnvoyFilters(objs *kubelint.Objects, names ...string) error {
	var have []string
	for _, ef := range envoyFilters(objs) {
		have = append(have, ef.meta.Name)
	}
	slices.Sort(have)
	if !slices.Equal(have, names) {
		return fmt.Errorf("EnvoyFilters %v, want %v", have, names)
	}
	return nil
}
