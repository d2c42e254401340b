// Package kubelint checks rendered Kubernetes manifests for what strict
// schema decoding cannot see and the API server or the cluster would only
// reveal on deploy: enum values and required fields the API server
// validates, references between objects (namespaces, selectors, Service
// target ports, ConfigMap volumes and mounts, the Redis URL's Service), the
// security context, resources and probes every container must have,
// envoy-rls's own wiring (its ports, or the emptyDir holding its Unix
// socket, /readyz and /healthz probes, and a rules directory mounted from a
// ConfigMap without subPath, holding the intended rules, also where
// envoy-rls runs inside another workload's pod), the operator's objects
// around it (a PodDisruptionBudget that never blocks drains, an autoscaler,
// NetworkPolicy, Prometheus Operator monitors and rules, Gateway API
// gateways and routes, each against the objects it names) and the
// kustomization files that build the manifests.
//
// It works on bytes and decoded objects that its caller hands it. It must
// not read or write files, run kustomize, or talk to a cluster, and it
// knows no repository layout: paths in its messages come from the caller.
package kubelint
