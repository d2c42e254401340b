package meshconfig

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The sidecar-uds variant runs envoy-rls inside the workload's pod, on a
// Unix socket shared with istio-proxy. Its pod side is a patch of the
// user's workload, so it is built here with a sample workload added to the
// root kustomization (in memory only: the manifests ship no workload).
const (
	udsComponent      = "components/sidecar-uds"
	sampleWorkloadRel = manifestsDir + "/sample-workload.yaml"
)

// sampleWorkload stands for Istio's httpbin sample, the workload that
// components/sidecar and components/sidecar-uds name, with the hardening
// kubelint asks of every container.
const sampleWorkload = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: httpbin
  namespace: default
spec:
  selector:
    matchLabels: {app: httpbin}
  template:
    metadata:
      labels: {app: httpbin, version: v1}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 1000}
      containers:
      - name: httpbin
        image: docker.io/mccutchen/go-httpbin:v2.15.0
        ports:
        - {name: http, containerPort: 8080}
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 200m, memory: 64Mi}
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
        readinessProbe: {httpGet: {path: /status/200, port: http}}
        livenessProbe: {httpGet: {path: /status/200, port: http}}
`

// udsVariantFS returns the manifests with components/sidecar and
// components/sidecar-uds enabled and the sample workload among the root's
// resources.
func udsVariantFS(t testing.TB, o overrides) filesys.FileSystem {
	t.Helper()
	root := manifestsDir + "/kustomization.yaml"
	base := o.read(t, root)
	const resources = "\nresources:\n"
	if !bytes.Contains(base, []byte(resources)) {
		t.Fatalf("meshconfig: %s has no resources list; update udsVariantFS", root)
	}
	all := o.manifestOverrides()
	all[root] = bytes.Replace(base, []byte(resources), []byte(resources+"- sample-workload.yaml\n"), 1)
	all[sampleWorkloadRel] = []byte(sampleWorkload)
	return variantFS(t, []string{"components/sidecar", udsComponent}, all)
}

// checkSidecarUDS builds the sidecar-uds variant, runs the manifests'
// checks on it, and cross-checks the two halves: the sidecar EnvoyFilter
// selects the workload's pods and dials a socket that the pod's envoy-rls
// serves from a volume istio-proxy mounts.
func checkSidecarUDS(t *testing.T, o overrides) error {
	objs, errs := checkBuild(t, "manifests with "+udsComponent, udsVariantFS(t, o), o)
	if objs == nil {
		return errors.Join(errs...)
	}
	var sidecar *envoyFilterDoc
	for _, ef := range envoyFilters(objs) {
		if _, err := checkEnvoyFilter(ef, objs.Services); err == nil && ef.meta.Name == "envoy-rls-sidecar" {
			sidecar = ef
		}
	}
	if sidecar == nil {
		return errors.Join(append(errs, errors.New("no valid EnvoyFilter envoy-rls-sidecar in the build"))...)
	}
	pipe, err := udsCluster(sidecar)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var pods []*appsv1.Deployment
	for _, d := range objs.Deployments {
		if d.Namespace == sidecar.meta.Namespace && selects(sidecar.spec.GetWorkloadSelector().GetLabels(), d.Spec.Template.Labels) {
			pods = append(pods, d)
		}
	}
	if len(pods) != 1 {
		return errors.Join(append(errs, fmt.Errorf("%s: its workloadSelector selects %d Deployments' pods in %s, want the sample workload's",
			sidecar.where, len(pods), sidecar.meta.Namespace))...)
	}
	d := pods[0]
	errs = append(errs, checkUDSPod(fmt.Sprintf("%s: Deployment %s/%s", udsComponent, d.Namespace, d.Name), d, pipe))
	return errors.Join(errs...)
}

// selects reports whether every label of selector is among labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestSidecarUDSWithoutWorkload builds the variant as shipped, where no
// Deployment matches the pod patch's target: kustomize must leave the
// build alone rather than fail, and add only the ConfigMap.
func TestSidecarUDSWithoutWorkload(t *testing.T) {
	objs, err := renderManifests(variantFS(t, []string{"components/sidecar", udsComponent}, nil), exampleRuleFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range objs.Deployments {
		if d.Namespace == "default" {
			t.Errorf("Deployment %s/%s in the build; the manifests ship no workload", d.Namespace, d.Name)
		}
	}
	found := false
	for _, cm := range objs.ConfigMaps {
		found = found || (cm.Namespace == "default" && cm.Name == "envoy-rls-config")
	}
	if !found {
		t.Error("no ConfigMap default/envoy-rls-config: the workload's envoy-rls would have no rules")
	}
}
