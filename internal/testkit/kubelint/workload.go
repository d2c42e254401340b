package kubelint

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkDeployment checks a Deployment's selector, enums, volumes and each
// container. configMaps are the manifests' ConfigMaps by "namespace/name".
func checkDeployment(p *problems, where string, dep *appsv1.Deployment, configMaps map[string]*corev1.ConfigMap) {
	spec := dep.Spec
	switch sel, err := metav1.LabelSelectorAsSelector(spec.Selector); {
	case spec.Selector == nil || len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0:
		p.add("%s: spec.selector is required", where)
	case err != nil:
		p.add("%s: spec.selector: %w", where, err)
	case !sel.Matches(labels.Set(spec.Template.Labels)):
		p.add("%s: spec.selector %v does not match the pod template's labels %v", where, sel, spec.Template.Labels)
	}
	p.enum(where, "spec.strategy.type", string(spec.Strategy.Type), strategyTypes)
	pod := spec.Template.Spec
	p.enum(where, "spec.template.spec.restartPolicy", string(pod.RestartPolicy), restartPolicy)
	podNonRoot := pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
	if sc := pod.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		p.enum(where, "spec.template.spec.securityContext.seccompProfile.type", string(sc.SeccompProfile.Type), seccompTypes)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if v.ConfigMap == nil {
			continue
		}
		if _, ok := configMaps[dep.Namespace+"/"+v.ConfigMap.Name]; !ok {
			p.add("%s: volume %q mounts ConfigMap %q, which the manifests do not define in %s", where, v.Name, v.ConfigMap.Name, dep.Namespace)
		}
	}
	if len(pod.Containers) == 0 {
		p.add("%s: spec.template.spec.containers is required", where)
	}
	for i, c := range pod.Containers {
		checkContainer(p, fmt.Sprintf("%s: containers[%d] %q", where, i, c.Name), c, podNonRoot, volumes)
	}
}

// checkContainer checks one container; podNonRoot says whether the pod
// already runs as non-root, volumes are the pod's by name.
func checkContainer(p *problems, cw string, c corev1.Container, podNonRoot bool, volumes map[string]corev1.Volume) {
	if c.Name == "" {
		p.add("%s: name is required", cw)
	}
	if c.Image == "" {
		p.add("%s: image is required", cw)
	}
	p.enum(cw, "imagePullPolicy", string(c.ImagePullPolicy), pullPolicies)
	ports := map[string]int32{}
	for _, port := range c.Ports {
		p.enum(cw, "ports.protocol", string(port.Protocol), protocols)
		if port.Name != "" {
			ports[port.Name] = port.ContainerPort
		}
	}
	checkSecurity(p, cw, c.SecurityContext, podNonRoot)
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			p.add("%s: resources.requests.%s is required", cw, res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			p.add("%s: resources.limits.%s is required", cw, res)
		}
	}
	checkProbes(p, cw, c, ports)
	envs := map[string]bool{}
	for _, e := range c.Env {
		if envs[e.Name] {
			p.add("%s: env %s is set twice", cw, e.Name)
		}
		envs[e.Name] = true
		if e.Value != "" && e.ValueFrom != nil {
			p.add("%s: env %s has both value and valueFrom", cw, e.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			p.add("%s: volumeMount %q names no volume", cw, m.Name)
		}
	}
	if c.Name == envoyRLSName {
		checkEnvoyRLSContainer(p, cw, c, volumes)
	}
}

// checkSecurity requires the hardening every container must have.
func checkSecurity(p *problems, cw string, sc *corev1.SecurityContext, podNonRoot bool) {
	if sc == nil {
		p.add("%s: securityContext is required", cw)
		return
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.add("%s: securityContext.readOnlyRootFilesystem must be true", cw)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add("%s: securityContext.allowPrivilegeEscalation must be false", cw)
	}
	if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
		p.add("%s: runAsNonRoot must be true (pod or container)", cw)
	}
}

// checkProbes requires readiness and liveness probes and checks that a
// probe's named port is one of ports, the container's by name.
func checkProbes(p *problems, cw string, c corev1.Container, ports map[string]int32) {
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
		if pr.probe == nil {
			if pr.name != "startupProbe" {
				p.add("%s: %s is required", cw, pr.name)
			}
			continue
		}
		var port intstr.IntOrString
		switch {
		case pr.probe.HTTPGet != nil:
			port = pr.probe.HTTPGet.Port
			p.enum(cw, pr.name+".httpGet.scheme", string(pr.probe.HTTPGet.Scheme), probeSchemes)
		case pr.probe.TCPSocket != nil:
			port = pr.probe.TCPSocket.Port
		default:
			continue
		}
		if _, ok := ports[port.StrVal]; port.Type == intstr.String && !ok {
			p.add("%s: %s uses port %q, which the container does not name", cw, pr.name, port.StrVal)
		}
	}
}

// podsFor returns the deployments in ns whose pod labels selector selects.
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

func checkService(p *problems, where string, svc *corev1.Service, deps []*appsv1.Deployment) {
	p.enum(where, "spec.type", string(svc.Spec.Type), serviceTypes)
	targets := podsFor(svc.Namespace, svc.Spec.Selector, deps)
	if len(targets) == 0 {
		p.add("%s: selector %v selects no Deployment's pods", where, svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) == 0 {
		p.add("%s: spec.ports is required", where)
	}
	for _, sp := range svc.Spec.Ports {
		p.enum(where, "ports.protocol", string(sp.Protocol), protocols)
		if sp.Port == 0 {
			p.add("%s: port %q: port is required", where, sp.Name)
		}
		for _, d := range targets {
			if !exposes(d, sp.TargetPort, sp.Port) {
				p.add("%s: port %q targets %s, which no container of Deployment %s exposes", where, sp.Name, sp.TargetPort.String(), d.Name)
			}
		}
		// Istio picks the protocol from appProtocol or the name prefix; a
		// gRPC port it takes for plain TCP or HTTP/1.1 breaks every call.
		grpcTarget := false
		for _, d := range targets {
			grpcTarget = grpcTarget || containerPortName(d, sp.TargetPort) == "grpc"
		}
		if grpcTarget && !strings.HasPrefix(sp.Name, "grpc") {
			p.add("%s: port %q targets a gRPC port but its name does not start with \"grpc\" (Istio would not use HTTP/2)", where, sp.Name)
		}
		if grpcTarget && sp.AppProtocol != nil && *sp.AppProtocol != "grpc" {
			p.add("%s: port %q targets a gRPC port but appProtocol is %q", where, sp.Name, *sp.AppProtocol)
		}
	}
}

// exposes reports whether a container of d has the port a Service port
// targets: by name, by number, or (no target) the Service port's number.
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

func checkPDB(p *problems, where string, pdb *policyv1.PodDisruptionBudget, deps []*appsv1.Deployment, hpas []*autoscalingv2.HorizontalPodAutoscaler) {
	if pdb.Spec.UnhealthyPodEvictionPolicy != nil {
		p.enum(where, "spec.unhealthyPodEvictionPolicy", string(*pdb.Spec.UnhealthyPodEvictionPolicy), evictionPolicy)
	}
	requireEvictableUnhealthy(p, where, pdb)
	if pdb.Spec.Selector == nil {
		p.add("%s: spec.selector is required", where)
		return
	}
	targets := podsFor(pdb.Namespace, pdb.Spec.Selector.MatchLabels, deps)
	if len(targets) == 0 {
		p.add("%s: selector selects no Deployment's pods", where)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.Type != intstr.Int {
		return
	}
	for _, d := range targets {
		if d.Spec.Replicas == nil && scaledBy(d, hpas) {
			continue // checkHPA compares the budget with minReplicas
		}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if pdb.Spec.MinAvailable.IntVal >= replicas {
			p.add("%s: minAvailable %d with %d replicas of %s blocks every node drain", where, pdb.Spec.MinAvailable.IntVal, replicas, d.Name)
		}
	}
}

// scaledBy reports whether an autoscaler of hpas scales d.
func scaledBy(d *appsv1.Deployment, hpas []*autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, h := range hpas {
		ref := h.Spec.ScaleTargetRef
		if h.Namespace == d.Namespace && ref.Kind == "Deployment" && ref.Name == d.Name {
			return true
		}
	}
	return false
}
