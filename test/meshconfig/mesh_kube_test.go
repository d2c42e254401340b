package meshconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifestsDir is the kustomization root, relative to the repository.
const manifestsDir = "manifests/istio"

// kubeObjects is a set of decoded Kubernetes objects, by kind.
type kubeObjects struct {
	namespaces   []*corev1.Namespace
	configMaps   []*corev1.ConfigMap
	services     []*corev1.Service
	deployments  []*appsv1.Deployment
	pdbs         []*policyv1.PodDisruptionBudget
	envoyFilters []*envoyFilterDoc
}

// kubeDecoder knows the built-in kinds the manifests use. Decoding goes
// through apimachinery's strict serializer, as kubectl's does: unknown
// (including wrongly capitalised) and duplicate fields are errors.
var kubeDecoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("meshconfig: scheme: %v", err))
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// decodeKube decodes one YAML document strictly into its typed object and
// adds it to objs.
func decodeKube(where string, doc []byte, objs *kubeObjects) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if tm.APIVersion == "networking.istio.io/v1alpha3" && tm.Kind == "EnvoyFilter" {
		ef, err := decodeEnvoyFilter(where, doc)
		if err != nil {
			return err
		}
		objs.envoyFilters = append(objs.envoyFilters, ef)
		return nil
	}
	obj, gvk, err := kubeDecoder.Decode(doc, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", where, tm.APIVersion, tm.Kind, err)
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		objs.namespaces = append(objs.namespaces, o)
	case *corev1.ConfigMap:
		objs.configMaps = append(objs.configMaps, o)
	case *corev1.Service:
		objs.services = append(objs.services, o)
	case *appsv1.Deployment:
		objs.deployments = append(objs.deployments, o)
	case *policyv1.PodDisruptionBudget:
		objs.pdbs = append(objs.pdbs, o)
	default:
		return fmt.Errorf("%s: unexpected kind %s (extend the manifest checks before shipping it)", where, gvk)
	}
	return nil
}

// decodeStream decodes every document of a YAML stream.
func decodeStream(where string, data []byte, objs *kubeObjects) error {
	docs, err := splitYAML(data)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var errs []error
	for i, doc := range docs {
		if err := decodeKube(fmt.Sprintf("%s[%d]", where, i), doc, objs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// manifestFS copies manifests/istio into an in-memory file system (at the
// same relative path), replacing the files named in overrides. Mutation
// tests and variant builds use it so the real tree is never written.
func manifestFS(t testing.TB, overrides map[string][]byte) filesys.FileSystem {
	t.Helper()
	root := repoRoot(t)
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(filepath.Join(root, manifestsDir), func(p string, de fs.DirEntry, err error) error {
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
		t.Fatalf("meshconfig: copy manifests: %v", err)
	}
	for rel, data := range overrides {
		if err := mem.WriteFile("/"+rel, data); err != nil {
			t.Fatalf("meshconfig: %v", err)
		}
	}
	return mem
}

// kustomizeBuild runs kustomize (the library kubectl embeds) on dir.
func kustomizeBuild(fsys filesys.FileSystem, dir string) ([]byte, error) {
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

// withComponents returns the root kustomization with its commented-out
// components list replaced by the given components.
func withComponents(t testing.TB, kustomization []byte, components ...string) []byte {
	t.Helper()
	const commented = "# components:\n"
	i := bytes.Index(kustomization, []byte(commented))
	if i < 0 {
		t.Fatalf("meshconfig: %s/kustomization.yaml has no %q block; update withComponents", manifestsDir, strings.TrimSpace(commented))
	}
	out := append([]byte{}, kustomization[:i]...)
	out = append(out, "components:\n"...)
	for _, c := range components {
		out = append(out, "- "+c+"\n"...)
	}
	return out
}

// renderManifests builds the kustomization in fsys, decodes every object
// strictly and runs all cross-object checks. ruleFiles are the rules the
// ConfigMap must hold (examples/config).
func renderManifests(fsys filesys.FileSystem, ruleFiles map[string][]byte) (*kubeObjects, error) {
	out, err := kustomizeBuild(fsys, "/"+manifestsDir)
	if err != nil {
		return nil, err
	}
	objs := &kubeObjects{}
	if err := decodeStream("kustomize build "+manifestsDir, out, objs); err != nil {
		return nil, err
	}
	if err := checkKube(objs, ruleFiles); err != nil {
		return nil, err
	}
	return objs, nil
}

// Checks beyond schema decoding. Kubernetes validates enums and required
// fields only on the API server, so the ones these manifests use are
// checked here.
var (
	pullPolicies   = []string{"", "Always", "IfNotPresent", "Never"}
	protocols      = []string{"", "TCP", "UDP", "SCTP"}
	serviceTypes   = []string{"", "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"}
	probeSchemes   = []string{"", "HTTP", "HTTPS"}
	seccompTypes   = []string{"RuntimeDefault", "Localhost", "Unconfined"}
	strategyTypes  = []string{"", "RollingUpdate", "Recreate"}
	restartPolicy  = []string{"", "Always"}
	evictionPolicy = []string{"", "IfHealthyBudget", "AlwaysAllow"}
)

func checkEnum(errs *[]error, where, field, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		*errs = append(*errs, fmt.Errorf("%s: %s: unsupported value %q (want %s)", where, field, value, strings.Join(nonEmpty(allowed), "|")))
	}
}

func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkKube runs the cross-object checks on a rendered set.
func checkKube(objs *kubeObjects, ruleFiles map[string][]byte) error {
	var errs []error
	namespaces := map[string]bool{}
	for _, ns := range objs.namespaces {
		namespaces[ns.Name] = true
	}
	// Namespaces the manifests may use without creating them: Istio's and
	// the sample workload's.
	external := map[string]bool{"istio-system": true, "default": true}
	checkMeta := func(kind string, m metav1.ObjectMeta) string {
		where := fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name)
		if m.Name == "" {
			errs = append(errs, fmt.Errorf("%s: metadata.name is required", where))
		}
		if m.Namespace == "" {
			errs = append(errs, fmt.Errorf("%s: metadata.namespace is required (the kustomization sets none)", where))
		} else if !namespaces[m.Namespace] && !external[m.Namespace] {
			errs = append(errs, fmt.Errorf("%s: namespace %q is neither created by the manifests nor one of %v", where, m.Namespace, sortedKeys(external)))
		}
		return where
	}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range objs.configMaps {
		checkMeta("ConfigMap", cm.ObjectMeta)
		configMaps[cm.Namespace+"/"+cm.Name] = cm
	}
	for _, dep := range objs.deployments {
		where := checkMeta("Deployment", dep.ObjectMeta)
		errs = append(errs, checkDeployment(where, dep, configMaps)...)
	}
	for _, svc := range objs.services {
		where := checkMeta("Service", svc.ObjectMeta)
		errs = append(errs, checkService(where, svc, objs.deployments)...)
	}
	for _, pdb := range objs.pdbs {
		where := checkMeta("PodDisruptionBudget", pdb.ObjectMeta)
		errs = append(errs, checkPDB(where, pdb, objs.deployments)...)
	}
	for _, ef := range objs.envoyFilters {
		checkMeta("EnvoyFilter", ef.meta)
	}
	errs = append(errs, checkRedisURLs(objs)...)
	errs = append(errs, checkRulesConfigMap(objs, ruleFiles)...)
	return errors.Join(errs...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkDeployment(where string, dep *appsv1.Deployment, configMaps map[string]*corev1.ConfigMap) []error {
	var errs []error
	spec := dep.Spec
	if spec.Selector == nil || len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.selector is required", where))
	} else if sel, err := metav1.LabelSelectorAsSelector(spec.Selector); err != nil {
		errs = append(errs, fmt.Errorf("%s: spec.selector: %w", where, err))
	} else if !sel.Matches(labels.Set(spec.Template.Labels)) {
		errs = append(errs, fmt.Errorf("%s: spec.selector %v does not match the pod template's labels %v", where, sel, spec.Template.Labels))
	}
	checkEnum(&errs, where, "spec.strategy.type", string(spec.Strategy.Type), strategyTypes)
	pod := spec.Template.Spec
	checkEnum(&errs, where, "spec.template.spec.restartPolicy", string(pod.RestartPolicy), restartPolicy)
	podNonRoot := pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
	if sc := pod.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		checkEnum(&errs, where, "spec.template.spec.securityContext.seccompProfile.type", string(sc.SeccompProfile.Type), seccompTypes)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if v.ConfigMap != nil {
			if _, ok := configMaps[dep.Namespace+"/"+v.ConfigMap.Name]; !ok {
				errs = append(errs, fmt.Errorf("%s: volume %q mounts ConfigMap %q, which the manifests do not define in %s", where, v.Name, v.ConfigMap.Name, dep.Namespace))
			}
		}
	}
	if len(pod.Containers) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.template.spec.containers is required", where))
	}
	for i, c := range pod.Containers {
		cw := fmt.Sprintf("%s: containers[%d] %q", where, i, c.Name)
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name is required", cw))
		}
		if c.Image == "" {
			errs = append(errs, fmt.Errorf("%s: image is required", cw))
		}
		checkEnum(&errs, cw, "imagePullPolicy", string(c.ImagePullPolicy), pullPolicies)
		ports := map[string]int32{}
		for _, p := range c.Ports {
			checkEnum(&errs, cw, "ports.protocol", string(p.Protocol), protocols)
			if p.Name != "" {
				ports[p.Name] = p.ContainerPort
			}
		}
		sc := c.SecurityContext
		switch {
		case sc == nil:
			errs = append(errs, fmt.Errorf("%s: securityContext is required", cw))
		default:
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				errs = append(errs, fmt.Errorf("%s: securityContext.readOnlyRootFilesystem must be true", cw))
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				errs = append(errs, fmt.Errorf("%s: securityContext.allowPrivilegeEscalation must be false", cw))
			}
			if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
				errs = append(errs, fmt.Errorf("%s: runAsNonRoot must be true (pod or container)", cw))
			}
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				errs = append(errs, fmt.Errorf("%s: resources.requests.%s is required", cw, res))
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				errs = append(errs, fmt.Errorf("%s: resources.limits.%s is required", cw, res))
			}
		}
		for _, pr := range []struct {
			name  string
			probe *corev1.Probe
		}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
			if pr.probe == nil {
				if pr.name != "startupProbe" {
					errs = append(errs, fmt.Errorf("%s: %s is required", cw, pr.name))
				}
				continue
			}
			var port intstr.IntOrString
			switch {
			case pr.probe.HTTPGet != nil:
				port = pr.probe.HTTPGet.Port
				checkEnum(&errs, cw, pr.name+".httpGet.scheme", string(pr.probe.HTTPGet.Scheme), probeSchemes)
			case pr.probe.TCPSocket != nil:
				port = pr.probe.TCPSocket.Port
			default:
				continue
			}
			if port.Type == intstr.String {
				if _, ok := ports[port.StrVal]; !ok {
					errs = append(errs, fmt.Errorf("%s: %s uses port %q, which the container does not name", cw, pr.name, port.StrVal))
				}
			}
		}
		envs := map[string]bool{}
		for _, e := range c.Env {
			if envs[e.Name] {
				errs = append(errs, fmt.Errorf("%s: env %s is set twice", cw, e.Name))
			}
			envs[e.Name] = true
			if e.Value != "" && e.ValueFrom != nil {
				errs = append(errs, fmt.Errorf("%s: env %s has both value and valueFrom", cw, e.Name))
			}
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				errs = append(errs, fmt.Errorf("%s: volumeMount %q names no volume", cw, m.Name))
			}
		}
		if c.Name == "envoy-rls" {
			errs = append(errs, checkEnvoyRLSContainer(cw, c, volumes)...)
		}
	}
	return errs
}

// checkEnvoyRLSContainer checks the wiring specific to envoy-rls: its
// probes, ports and rules mount.
func checkEnvoyRLSContainer(cw string, c corev1.Container, volumes map[string]corev1.Volume) []error {
	var errs []error
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		errs = append(errs, fmt.Errorf("%s: readinessProbe must GET /readyz", cw))
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		errs = append(errs, fmt.Errorf("%s: livenessProbe must GET /healthz", cw))
	}
	want := map[int32]bool{8081: false, 8080: false}
	for _, p := range c.Ports {
		if _, ok := want[p.ContainerPort]; ok {
			want[p.ContainerPort] = true
		}
	}
	for port, seen := range want {
		if !seen {
			errs = append(errs, fmt.Errorf("%s: containerPort %d is missing", cw, port))
		}
	}
	dir := "/etc/envoy-rls/config"
	for _, e := range c.Env {
		if e.Name == "ENVOY_RLS_CONFIG_DIR" {
			dir = e.Value
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		mounted = true
		if m.SubPath != "" {
			errs = append(errs, fmt.Errorf("%s: the rules mount uses subPath, which never sees ConfigMap updates", cw))
		}
		if v, ok := volumes[m.Name]; ok && v.ConfigMap == nil {
			errs = append(errs, fmt.Errorf("%s: the rules directory %s is not a ConfigMap volume", cw, dir))
		}
	}
	if !mounted {
		errs = append(errs, fmt.Errorf("%s: nothing is mounted at the config directory %s", cw, dir))
	}
	return errs
}

// podsFor returns the deployments in ns whose pod labels svc's selector
// selects.
func podsFor(ns string, selector map[string]string, deps []*appsv1.Deployment) []*appsv1.Deployment {
	if len(selector) == 0 {
		return nil
	}
	var out []*appsv1.Deployment
	for _, d := range deps {
		if d.Namespace == ns && labels.SelectorFromSet(selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

func checkService(where string, svc *corev1.Service, deps []*appsv1.Deployment) []error {
	var errs []error
	checkEnum(&errs, where, "spec.type", string(svc.Spec.Type), serviceTypes)
	targets := podsFor(svc.Namespace, svc.Spec.Selector, deps)
	if len(targets) == 0 {
		errs = append(errs, fmt.Errorf("%s: selector %v selects no Deployment's pods", where, svc.Spec.Selector))
	}
	if len(svc.Spec.Ports) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.ports is required", where))
	}
	for _, p := range svc.Spec.Ports {
		checkEnum(&errs, where, "ports.protocol", string(p.Protocol), protocols)
		if p.Port == 0 {
			errs = append(errs, fmt.Errorf("%s: port %q: port is required", where, p.Name))
		}
		for _, d := range targets {
			if !exposes(d, p.TargetPort, p.Port) {
				errs = append(errs, fmt.Errorf("%s: port %q targets %s, which no container of Deployment %s exposes", where, p.Name, p.TargetPort.String(), d.Name))
			}
		}
		// Istio picks the protocol from appProtocol or the name prefix; a
		// gRPC port it takes for plain TCP or HTTP/1.1 breaks every call.
		grpcTarget := false
		for _, d := range targets {
			grpcTarget = grpcTarget || containerPortName(d, p.TargetPort) == "grpc"
		}
		if grpcTarget && !strings.HasPrefix(p.Name, "grpc") {
			errs = append(errs, fmt.Errorf("%s: port %q targets a gRPC port but its name does not start with \"grpc\" (Istio would not use HTTP/2)", where, p.Name))
		}
		if grpcTarget && p.AppProtocol != nil && *p.AppProtocol != "grpc" {
			errs = append(errs, fmt.Errorf("%s: port %q targets a gRPC port but appProtocol is %q", where, p.Name, *p.AppProtocol))
		}
	}
	return errs
}

func exposes(d *appsv1.Deployment, target intstr.IntOrString, port int32) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			switch {
			case target.Type == intstr.String && target.StrVal != "" && cp.Name == target.StrVal,
				target.Type == intstr.Int && target.IntVal != 0 && cp.ContainerPort == target.IntVal,
				target.Type == intstr.Int && target.IntVal == 0 && cp.ContainerPort == port:
				return true
			}
		}
	}
	return false
}

func containerPortName(d *appsv1.Deployment, target intstr.IntOrString) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if (target.Type == intstr.String && cp.Name == target.StrVal) || (target.Type == intstr.Int && cp.ContainerPort == target.IntVal) {
				return cp.Name
			}
		}
	}
	return ""
}

func checkPDB(where string, pdb *policyv1.PodDisruptionBudget, deps []*appsv1.Deployment) []error {
	var errs []error
	if pdb.Spec.UnhealthyPodEvictionPolicy != nil {
		checkEnum(&errs, where, "spec.unhealthyPodEvictionPolicy", string(*pdb.Spec.UnhealthyPodEvictionPolicy), evictionPolicy)
	}
	if pdb.Spec.Selector == nil {
		return append(errs, fmt.Errorf("%s: spec.selector is required", where))
	}
	targets := podsFor(pdb.Namespace, pdb.Spec.Selector.MatchLabels, deps)
	if len(targets) == 0 {
		errs = append(errs, fmt.Errorf("%s: selector selects no Deployment's pods", where))
	}
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int {
		for _, d := range targets {
			replicas := int32(1)
			if d.Spec.Replicas != nil {
				replicas = *d.Spec.Replicas
			}
			if pdb.Spec.MinAvailable.IntVal >= replicas {
				errs = append(errs, fmt.Errorf("%s: minAvailable %d with %d replicas of %s blocks every node drain", where, pdb.Spec.MinAvailable.IntVal, replicas, d.Name))
			}
		}
	}
	return errs
}

// checkRedisURLs checks that a literal ENVOY_RLS_REDIS_URL points at a
// Service the manifests define, on a port it has.
func checkRedisURLs(objs *kubeObjects) []error {
	var errs []error
	for _, d := range objs.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name != "ENVOY_RLS_REDIS_URL" || e.Value == "" {
					continue
				}
				where := fmt.Sprintf("Deployment %s/%s: ENVOY_RLS_REDIS_URL", d.Namespace, d.Name)
				u, err := url.Parse(e.Value)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				if !svcHostExists(u.Host, objs.services) {
					errs = append(errs, fmt.Errorf("%s: %s is not a Service and port of these manifests", where, u.Host))
				}
			}
		}
	}
	return errs
}

// svcHostExists reports whether hostport ("name.ns.svc.cluster.local:port")
// names a Service port of the manifests.
func svcHostExists(hostport string, services []*corev1.Service) bool {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false
	}
	for _, s := range services {
		if host != s.Name+"."+s.Namespace+".svc.cluster.local" && host != s.Name+"."+s.Namespace+".svc" {
			continue
		}
		for _, p := range s.Spec.Ports {
			if int(p.Port) == port {
				return true
			}
		}
	}
	return false
}

// checkRulesConfigMap finds the ConfigMap the envoy-rls Deployment mounts as
// its rules, validates its rules as `envoy-rls validate` would, and checks
// that it ships exactly examples/config.
func checkRulesConfigMap(objs *kubeObjects, ruleFiles map[string][]byte) []error {
	cm := rulesConfigMap(objs)
	if cm == nil {
		return []error{errors.New("no ConfigMap is mounted as the envoy-rls rules directory")}
	}
	where := fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	files := map[string][]byte{}
	for k, v := range cm.Data {
		files[where+" "+k] = []byte(v)
	}
	var errs []error
	if _, err := loadRules(files); err != nil {
		errs = append(errs, fmt.Errorf("%s: rules do not validate:\n%w", where, err))
	}
	want := map[string][]byte{}
	for name, data := range ruleFiles {
		want[path.Base(name)] = data
	}
	for k, v := range cm.Data {
		if w, ok := want[k]; !ok {
			errs = append(errs, fmt.Errorf("%s: key %q is not a file of examples/config", where, k))
		} else if !bytes.Equal(w, []byte(v)) {
			errs = append(errs, fmt.Errorf("%s: key %q differs from examples/config/%s (copy it to %s/rules/)", where, k, k, manifestsDir))
		}
	}
	for k := range want {
		if _, ok := cm.Data[k]; !ok {
			errs = append(errs, fmt.Errorf("%s: examples/config/%s is missing (copy it to %s/rules/ and list it in the configMapGenerator)", where, k, manifestsDir))
		}
	}
	return errs
}

func rulesConfigMap(objs *kubeObjects) *corev1.ConfigMap {
	for _, d := range objs.deployments {
		if d.Name != "envoy-rls" {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap == nil {
				continue
			}
			for _, cm := range objs.configMaps {
				if cm.Namespace == d.Namespace && cm.Name == v.ConfigMap.Name {
					return cm
				}
			}
		}
	}
	return nil
}

// kustomization is the subset of kustomize's Kustomization and Component
// these manifests use; decoding is strict, so a field kustomize would not
// understand either fails here too.
type kustomization struct {
	APIVersion         string   `json:"apiVersion"`
	Kind               string   `json:"kind"`
	Resources          []string `json:"resources,omitempty"`
	Components         []string `json:"components,omitempty"`
	ConfigMapGenerator []struct {
		Name      string   `json:"name"`
		Namespace string   `json:"namespace,omitempty"`
		Files     []string `json:"files,omitempty"`
	} `json:"configMapGenerator,omitempty"`
	GeneratorOptions *struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash,omitempty"`
	} `json:"generatorOptions,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// checkKustomization checks one kustomization.yaml: every file and
// directory it names exists, and each patch file holds one document
// (kustomize releases before v5.6 crash on multi-document patch files).
func checkKustomization(rel string, data []byte, exists func(rel string) (isDir bool, ok bool), read func(rel string) ([]byte, error)) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	var k kustomization
	strict, err := kjson.UnmarshalStrict(js, &k)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	var errs []error
	for _, e := range strict {
		errs = append(errs, fmt.Errorf("%s: %w", rel, e))
	}
	switch {
	case k.Kind == "Kustomization" && k.APIVersion == "kustomize.config.k8s.io/v1beta1":
	case k.Kind == "Component" && k.APIVersion == "kustomize.config.k8s.io/v1alpha1":
	default:
		errs = append(errs, fmt.Errorf("%s: unexpected %s %s", rel, k.APIVersion, k.Kind))
	}
	dir := path.Dir(rel)
	need := func(field, name string, wantDir bool) {
		isDir, ok := exists(path.Join(dir, name))
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: %s entry %q does not exist", rel, field, name))
		case wantDir && !isDir:
			errs = append(errs, fmt.Errorf("%s: %s entry %q is not a directory", rel, field, name))
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
	for _, p := range k.Patches {
		need("patches", p.Path, false)
		data, err := read(path.Join(dir, p.Path))
		if err != nil {
			continue
		}
		docs, err := splitYAML(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: patch %s: %w", rel, p.Path, err))
		} else if len(docs) != 1 {
			errs = append(errs, fmt.Errorf("%s: patch %s holds %d documents, want 1 (older kustomize crashes on more)", rel, p.Path, len(docs)))
		}
	}
	return errors.Join(errs...)
}

func TestKustomizationsReferenceExistingFiles(t *testing.T) {
	errs := checkKustomizations(manifestFS(t, nil))
	if len(errs) < 3 {
		t.Fatalf("checked %d kustomization.yaml files under %s, want the root and its 2 components", len(errs), manifestsDir)
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
	{"managed-redis", []string{"components/managed-redis"}},
	{"all", []string{"components/sidecar", "components/managed-redis"}},
}

// variantFS returns the manifests with the variant's components enabled.
func variantFS(t testing.TB, components []string, overrides map[string][]byte) filesys.FileSystem {
	t.Helper()
	all := map[string][]byte{}
	for k, v := range overrides {
		all[k] = v
	}
	if components != nil {
		root := manifestsDir + "/kustomization.yaml"
		base, ok := all[root]
		if !ok {
			base = readRepoFile(t, root)
		}
		all[root] = withComponents(t, base, components...)
	}
	return manifestFS(t, all)
}

func TestManifestsBuildAndDecodeStrictly(t *testing.T) {
	ruleFiles := exampleRuleFiles(t)
	for _, v := range manifestVariants {
		t.Run(v.name, func(t *testing.T) {
			objs, err := renderManifests(variantFS(t, v.components, nil), ruleFiles)
			if err != nil {
				t.Fatal(err)
			}
			has := func(kind, ns, name string) bool {
				for _, o := range objs.list() {
					if o[0] == kind && o[1] == ns && o[2] == name {
						return true
					}
				}
				return false
			}
			sidecar := slices.Contains(v.components, "components/sidecar")
			managed := slices.Contains(v.components, "components/managed-redis")
			for _, want := range []struct {
				kind, ns, name string
				present        bool
			}{
				{"Namespace", "", "envoy-rls", true},
				{"Deployment", "envoy-rls", "envoy-rls", true},
				{"Service", "envoy-rls", "envoy-rls", true},
				{"PodDisruptionBudget", "envoy-rls", "envoy-rls", true},
				{"ConfigMap", "envoy-rls", "envoy-rls-config", true},
				{"EnvoyFilter", "istio-system", "envoy-rls-gateway", true},
				{"EnvoyFilter", "default", "envoy-rls-sidecar", sidecar},
				{"Deployment", "envoy-rls", "redis", !managed},
				{"Service", "envoy-rls", "redis", !managed},
			} {
				if got := has(want.kind, want.ns, want.name); got != want.present {
					t.Errorf("%s %s/%s present = %v, want %v", want.kind, want.ns, want.name, got, want.present)
				}
			}
			if managed {
				e := envVar(objs, "envoy-rls", "ENVOY_RLS_REDIS_URL")
				if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.Value != "" {
					t.Errorf("managed-redis: ENVOY_RLS_REDIS_URL = %+v, want only a secretKeyRef", e)
				}
			}
		})
	}
}

// list names every object as (kind, namespace, name).
func (o *kubeObjects) list() [][3]string {
	var out [][3]string
	for _, x := range o.namespaces {
		out = append(out, [3]string{"Namespace", "", x.Name})
	}
	for _, x := range o.configMaps {
		out = append(out, [3]string{"ConfigMap", x.Namespace, x.Name})
	}
	for _, x := range o.services {
		out = append(out, [3]string{"Service", x.Namespace, x.Name})
	}
	for _, x := range o.deployments {
		out = append(out, [3]string{"Deployment", x.Namespace, x.Name})
	}
	for _, x := range o.pdbs {
		out = append(out, [3]string{"PodDisruptionBudget", x.Namespace, x.Name})
	}
	for _, x := range o.envoyFilters {
		out = append(out, [3]string{"EnvoyFilter", x.meta.Namespace, x.meta.Name})
	}
	return out
}

func envVar(objs *kubeObjects, deployment, name string) *corev1.EnvVar {
	for _, d := range objs.deployments {
		if d.Name != deployment {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for i := range c.Env {
				if c.Env[i].Name == name {
					return &c.Env[i]
				}
			}
		}
	}
	return nil
}

// TestManifestFilesDecodeStrictly decodes each resource file on its own, so
// that a problem is reported against the file that has it.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	for _, rel := range manifestResourceFiles(t) {
		t.Run(rel, func(t *testing.T) {
			objs := &kubeObjects{}
			if err := decodeStream(rel, readRepoFile(t, rel), objs); err != nil {
				t.Fatal(err)
			}
			if len(objs.list()) == 0 {
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
	root := repoRoot(t)
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
		var k kustomization
		if err := yaml.Unmarshal(readRepoFile(t, rel), &k); err != nil {
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
