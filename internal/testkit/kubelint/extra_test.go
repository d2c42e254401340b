package kubelint

import (
	"testing"
)

// operatorKit adds to goodManifests what the Helm chart and the kustomize
// components add: an autoscaler (with the Deployment's replicas left to
// it), a NetworkPolicy, Prometheus Operator monitors and rules, and a
// Gateway API gateway with a route.
const operatorKit = `
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: envoy-rls, namespace: rls}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: envoy-rls}
  minReplicas: 2
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: envoy-rls, namespace: rls}
spec:
  podSelector: {matchLabels: {app: envoy-rls}}
  policyTypes: [Ingress]
  ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchLabels: {security.istio.io/tlsMode: istio}}}]
    ports: [{port: grpc, protocol: TCP}]
  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
    ports: [{port: http, protocol: TCP}]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: envoy-rls, namespace: rls}
spec:
  selector: {matchLabels: {app: envoy-rls}}
  endpoints: [{port: http, path: /metrics}]
---
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: envoy-rls, namespace: rls}
spec:
  selector: {matchLabels: {app: envoy-rls}}
  podMetricsEndpoints: [{port: http, path: /metrics}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: envoy-rls, namespace: rls}
spec:
  groups:
  - name: envoy-rls
    rules:
    - {alert: ReloadFailing, expr: envoy_rls_config_last_reload_successful == 0}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: rls}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: edge, namespace: rls}
spec:
  parentRefs: [{name: edge}]
  rules:
  - backendRefs: [{name: envoy-rls, port: 8080}]
`

// kitManifests is goodManifests with the operator's kit, the Service
// labelled for the ServiceMonitor and the replicas left to the HPA.
func kitManifests(t *testing.T) string {
	t.Helper()
	m := mutate(t, goodManifests, "  replicas: 2\n", "")
	m = mutate(t, m, "kind: Service\nmetadata: {name: envoy-rls, namespace: rls}", "kind: Service\nmetadata: {name: envoy-rls, namespace: rls, labels: {app: envoy-rls}}")
	return m + operatorKit
}

func TestCheckOperatorKitGood(t *testing.T) {
	if err := checkManifests(t, kitManifests(t), Options{Rules: testRules()}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOperatorKitBad(t *testing.T) {
	for _, tc := range []struct {
		name, old, repl string
		want            []string
	}{
		{"HPA targets nothing", "kind: Deployment, name: envoy-rls}", "kind: Deployment, name: rls}",
			[]string{"HorizontalPodAutoscaler rls/envoy-rls: scaleTargetRef apps/v1 rls is not a Deployment"}},
		{"HPA fights the replicas", "spec:\n  selector: {matchLabels: {app: envoy-rls}}\n  strategy", "spec:\n  replicas: 3\n  selector: {matchLabels: {app: envoy-rls}}\n  strategy",
			[]string{"Deployment envoy-rls sets spec.replicas"}},
		{"HPA minimum at the PDB's", "minReplicas: 2", "minReplicas: 1",
			[]string{"minReplicas 1 with PodDisruptionBudget envoy-rls minAvailable 1 blocks every node drain"}},
		{"HPA range upside down", "maxReplicas: 6", "maxReplicas: 1",
			[]string{"replicas from 2 to 1"}},
		{"NetworkPolicy selects nothing", "podSelector: {matchLabels: {app: envoy-rls}}\n  policyTypes", "podSelector: {matchLabels: {app: rls}}\n  policyTypes",
			[]string{"NetworkPolicy rls/envoy-rls: podSelector selects no Deployment's pods"}},
		{"NetworkPolicy on an unnamed port", "ports: [{port: grpc, protocol: TCP}]", "ports: [{port: grpc-web, protocol: TCP}]",
			[]string{`ingress[0] admits port "grpc-web", which Deployment envoy-rls does not name`}},
		{"NetworkPolicy open to all", "  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]\n    ports", "  - ports",
			[]string{"ingress[1] has no from"}},
		{"ServiceMonitor selects nothing", "kind: ServiceMonitor\nmetadata: {name: envoy-rls, namespace: rls}\nspec:\n  selector: {matchLabels: {app: envoy-rls}}",
			"kind: ServiceMonitor\nmetadata: {name: envoy-rls, namespace: rls}\nspec:\n  selector: {matchLabels: {app: rls}}",
			[]string{"ServiceMonitor rls/envoy-rls: selector app=rls selects no Service"}},
		{"ServiceMonitor on a missing port", "endpoints: [{port: http, path: /metrics}]", "endpoints: [{port: metrics, path: /metrics}]",
			[]string{`endpoints[0] port "metrics" is not a port of Service envoy-rls`}},
		{"PodMonitor on a missing port", "podMetricsEndpoints: [{port: http,", "podMetricsEndpoints: [{port: metrics,",
			[]string{`podMetricsEndpoints[0] port "metrics" is not a port of Deployment envoy-rls`}},
		{"PodMonitor misspelt", "podMetricsEndpoints:", "podMetricEndpoints:",
			[]string{`unknown field "spec.podMetricEndpoints"`}},
		{"empty PrometheusRule", "  groups:\n  - name: envoy-rls\n    rules:\n    - {alert: ReloadFailing, expr: envoy_rls_config_last_reload_successful == 0}\n", "  groups: []\n",
			[]string{"PrometheusRule rls/envoy-rls: spec.groups is empty"}},
		{"route to a missing Gateway", "parentRefs: [{name: edge}]", "parentRefs: [{name: public}]",
			[]string{"HTTPRoute rls/edge: parentRefs[0] rls/public is not a Gateway"}},
		{"route to a missing port", "backendRefs: [{name: envoy-rls, port: 8080}]", "backendRefs: [{name: envoy-rls, port: 9090}]",
			[]string{"rules[0].backendRefs[0] rls/envoy-rls:9090 is not a Service port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkManifests(t, mutate(t, kitManifests(t), tc.old, tc.repl), Options{Rules: testRules()})
			expectMentions(t, err, tc.want)
		})
	}
}

// TestCheckXDSNeedsNoRules: an envoy-rls that takes its rules from xDS
// mounts no rules ConfigMap and is not asked for one.
func TestCheckXDSNeedsNoRules(t *testing.T) {
	m := mutate(t, goodManifests, "        - {name: rules, mountPath: /etc/envoy-rls/config}\n", "")
	if err := checkManifests(t, m, Options{Rules: testRules()}); err == nil {
		t.Fatal("no rules mounted and no xDS: want an error")
	}
	m = mutate(t, m, "        - {name: ENVOY_RLS_LOG_LEVEL, value: info}", "        - {name: ENVOY_RLS_CONFIG_SOURCE, value: xds}")
	m = mutate(t, m, "      volumes:\n      - name: rules\n        configMap: {name: rules}\n", "")
	m = mutate(t, m, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: rules, namespace: rls}\ndata:\n  edge.yaml: \"domain: edge\\n\"\n---\n", "")
	if err := checkManifests(t, m, Options{Rules: testRules()}); err != nil {
		t.Fatal(err)
	}
}
