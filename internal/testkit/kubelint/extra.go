package kubelint

import (
	"fmt"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// add files a decoded object under its kind and reports whether it is
// one of the kinds Objects holds.
func (o *Objects) add(obj runtime.Object) bool {
	switch x := obj.(type) {
	case *corev1.Namespace:
		o.Namespaces = append(o.Namespaces, x)
	case *corev1.ConfigMap:
		o.ConfigMaps = append(o.ConfigMaps, x)
	case *corev1.Service:
		o.Services = append(o.Services, x)
	case *appsv1.Deployment:
		o.Deployments = append(o.Deployments, x)
	case *policyv1.PodDisruptionBudget:
		o.PDBs = append(o.PDBs, x)
	case *autoscalingv2.HorizontalPodAutoscaler:
		o.HPAs = append(o.HPAs, x)
	case *networkingv1.NetworkPolicy:
		o.Policies = append(o.Policies, x)
	case *monitoringv1.ServiceMonitor:
		o.ServiceMonitors = append(o.ServiceMonitors, x)
	case *monitoringv1.PodMonitor:
		o.PodMonitors = append(o.PodMonitors, x)
	case *monitoringv1.PrometheusRule:
		o.PrometheusRules = append(o.PrometheusRules, x)
	case *gatewayv1.Gateway:
		o.Gateways = append(o.Gateways, x)
	case *gatewayv1.HTTPRoute:
		o.HTTPRoutes = append(o.HTTPRoutes, x)
	default:
		return false
	}
	return true
}

// checkExtra checks the operator's kinds against the rest of the set.
func checkExtra(p *problems, m metaCheck, objs *Objects) {
	for _, h := range objs.HPAs {
		checkHPA(p, m.check(p, "HorizontalPodAutoscaler", h.ObjectMeta), h, objs)
	}
	for _, np := range objs.Policies {
		checkNetworkPolicy(p, m.check(p, "NetworkPolicy", np.ObjectMeta), np, objs.Deployments)
	}
	for _, sm := range objs.ServiceMonitors {
		checkServiceMonitor(p, m.check(p, "ServiceMonitor", sm.ObjectMeta), sm, objs.Services)
	}
	for _, pm := range objs.PodMonitors {
		checkPodMonitor(p, m.check(p, "PodMonitor", pm.ObjectMeta), pm, objs.Deployments)
	}
	for _, pr := range objs.PrometheusRules {
		where := m.check(p, "PrometheusRule", pr.ObjectMeta)
		if len(pr.Spec.Groups) == 0 {
			p.add("%s: spec.groups is empty", where)
		}
	}
	for _, g := range objs.Gateways {
		where := m.check(p, "Gateway", g.ObjectMeta)
		if g.Spec.GatewayClassName == "" || len(g.Spec.Listeners) == 0 {
			p.add("%s: spec.gatewayClassName and spec.listeners are required", where)
		}
	}
	for _, r := range objs.HTTPRoutes {
		checkHTTPRoute(p, m.check(p, "HTTPRoute", r.ObjectMeta), r, objs, m.external)
	}
}

// checkHPA requires the target to be a Deployment of the set that leaves
// spec.replicas to the autoscaler (else every apply resets the count), a
// sane replica range, and a PDB that still allows an eviction at the
// minimum.
func checkHPA(p *problems, where string, h *autoscalingv2.HorizontalPodAutoscaler, objs *Objects) {
	ref := h.Spec.ScaleTargetRef
	var target *appsv1.Deployment
	for _, d := range objs.Deployments {
		if ref.Kind == "Deployment" && ref.APIVersion == "apps/v1" && d.Namespace == h.Namespace && d.Name == ref.Name {
			target = d
		}
	}
	if target == nil {
		p.add("%s: scaleTargetRef %s %s is not a Deployment of these manifests in %s", where, ref.APIVersion, ref.Name, h.Namespace)
		return
	}
	minReplicas := int32(1)
	if h.Spec.MinReplicas != nil {
		minReplicas = *h.Spec.MinReplicas
	}
	if minReplicas < 1 || h.Spec.MaxReplicas < minReplicas {
		p.add("%s: replicas from %d to %d: want 1 <= minReplicas <= maxReplicas", where, minReplicas, h.Spec.MaxReplicas)
	}
	if target.Spec.Replicas != nil {
		p.add("%s: Deployment %s sets spec.replicas, which every apply would reset under the autoscaler; leave it out", where, target.Name)
	}
	if len(h.Spec.Metrics) == 0 {
		p.add("%s: spec.metrics is empty", where)
	}
	for _, pdb := range objs.PDBs {
		if pdb.Namespace != h.Namespace || pdb.Spec.MinAvailable == nil || pdb.Spec.Selector == nil ||
			!labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(target.Spec.Template.Labels)) {
			continue
		}
		if pdb.Spec.MinAvailable.IntVal >= minReplicas {
			p.add("%s: minReplicas %d with PodDisruptionBudget %s minAvailable %d blocks every node drain at the minimum", where, minReplicas, pdb.Name, pdb.Spec.MinAvailable.IntVal)
		}
	}
}

// checkNetworkPolicy requires the policy to select pods of the set, and
// each named port it admits to be a port those pods name.
func checkNetworkPolicy(p *problems, where string, np *networkingv1.NetworkPolicy, deps []*appsv1.Deployment) {
	for _, t := range np.Spec.PolicyTypes {
		p.enum(where, "spec.policyTypes", string(t), []string{string(networkingv1.PolicyTypeIngress), string(networkingv1.PolicyTypeEgress)})
	}
	targets := podsFor(np.Namespace, np.Spec.PodSelector.MatchLabels, deps)
	if len(targets) == 0 {
		p.add("%s: podSelector selects no Deployment's pods", where)
	}
	if len(np.Spec.Ingress) == 0 && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		p.add("%s: an Ingress policy with no rule admits nothing (not even probes through a proxy)", where)
	}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			p.add("%s: ingress[%d] has no from: it admits every source", where, i)
		}
		for _, port := range rule.Ports {
			if port.Port == nil || port.Port.StrVal == "" {
				continue
			}
			for _, d := range targets {
				if containerPortNamed(d, port.Port.StrVal) == nil {
					p.add("%s: ingress[%d] admits port %q, which Deployment %s does not name", where, i, port.Port.StrVal, d.Name)
				}
			}
		}
	}
}

func containerPortNamed(d *appsv1.Deployment, name string) *corev1.ContainerPort {
	for _, c := range d.Spec.Template.Spec.Containers {
		for i := range c.Ports {
			if c.Ports[i].Name == name {
				return &c.Ports[i]
			}
		}
	}
	return nil
}

// checkServiceMonitor requires it to select a Service of its namespace
// with the port each endpoint names.
func checkServiceMonitor(p *problems, where string, sm *monitoringv1.ServiceMonitor, services []*corev1.Service) {
	var selected []*corev1.Service
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		p.add("%s: spec.selector: %w", where, err)
		return
	}
	for _, s := range services {
		if s.Namespace == sm.Namespace && !sel.Empty() && sel.Matches(labels.Set(s.Labels)) {
			selected = append(selected, s)
		}
	}
	if len(selected) == 0 {
		p.add("%s: selector %v selects no Service's labels in %s", where, sel, sm.Namespace)
	}
	if len(sm.Spec.Endpoints) == 0 {
		p.add("%s: spec.endpoints is empty", where)
	}
	for i, e := range sm.Spec.Endpoints {
		for _, s := range selected {
			if !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == e.Port }) {
				p.add("%s: endpoints[%d] port %q is not a port of Service %s", where, i, e.Port, s.Name)
			}
		}
	}
}

// checkPodMonitor requires it to select pods of its namespace that name
// the port each endpoint scrapes.
func checkPodMonitor(p *problems, where string, pm *monitoringv1.PodMonitor, deps []*appsv1.Deployment) {
	targets := podsFor(pm.Namespace, pm.Spec.Selector.MatchLabels, deps)
	if len(targets) == 0 {
		p.add("%s: selector selects no Deployment's pods in %s", where, pm.Namespace)
	}
	if len(pm.Spec.PodMetricsEndpoints) == 0 {
		p.add("%s: spec.podMetricsEndpoints is empty", where)
	}
	for i, e := range pm.Spec.PodMetricsEndpoints {
		if e.Port == nil {
			p.add("%s: podMetricsEndpoints[%d]: port is required", where, i)
			continue
		}
		for _, d := range targets {
			if containerPortNamed(d, *e.Port) == nil {
				p.add("%s: podMetricsEndpoints[%d] port %q is not a port of Deployment %s", where, i, *e.Port, d.Name)
			}
		}
	}
}

// checkHTTPRoute requires each parent to be a Gateway of the set and each
// backend a Service port of the set, unless in an external namespace.
func checkHTTPRoute(p *problems, where string, r *gatewayv1.HTTPRoute, objs *Objects, external []string) {
	if len(r.Spec.ParentRefs) == 0 {
		p.add("%s: spec.parentRefs is empty: the route attaches to no Gateway", where)
	}
	for i, ref := range r.Spec.ParentRefs {
		ns := r.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if !slices.ContainsFunc(objs.Gateways, func(g *gatewayv1.Gateway) bool { return g.Namespace == ns && g.Name == string(ref.Name) }) {
			p.add("%s: parentRefs[%d] %s/%s is not a Gateway of these manifests", where, i, ns, ref.Name)
		}
	}
	for i, rule := range r.Spec.Rules {
		for j, b := range rule.BackendRefs {
			if b.Kind != nil && *b.Kind != "Service" {
				continue
			}
			ns := r.Namespace
			if b.Namespace != nil {
				ns = string(*b.Namespace)
			}
			if b.Port == nil {
				p.add("%s: rules[%d].backendRefs[%d]: port is required for a Service", where, i, j)
				continue
			}
			if !svcHostExists(fmt.Sprintf("%s.%s.svc:%d", b.Name, ns, *b.Port), objs.Services) && !slices.Contains(external, ns) {
				p.add("%s: rules[%d].backendRefs[%d] %s/%s:%d is not a Service port of these manifests", where, i, j, ns, b.Name, *b.Port)
			}
		}
	}
}

// requireEvictableUnhealthy reports a PDB with minAvailable that does not
// let unhealthy pods be evicted: when every pod is unready (Redis down
// under failure mode error), no eviction could proceed and node drains
// would hang.
func requireEvictableUnhealthy(p *problems, where string, pdb *policyv1.PodDisruptionBudget) {
	if pdb.Spec.MinAvailable == nil {
		return
	}
	if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		p.add("%s: minAvailable without unhealthyPodEvictionPolicy: AlwaysAllow blocks node drains while the pods are unready (a Redis outage)", where)
	}
}
