// Package istio has a real istiod (pilot-discovery, built pinned by
// `make test-deps` into bin/tools/istiod-<version>, with the two small guards of
// build/istio/no-kubernetes-guards.patch) apply every EnvoyFilter the
// repository ships to real Envoys, and proves each by limited traffic:
// the kustomize base manifests/istio and each of its components, the Helm
// chart charts/envoy-rls rendered over each values set, and the guides'
// EnvoyFilter snippets.
//
// istiod runs without Kubernetes (--registries= --configDir=DIR) and
// serves plaintext xDS. The config directory holds the manifests as a user
// applies them, with only what needs Kubernetes replaced: the envoy-rls
// Service (and its Deployment and ConfigMap) by a ServiceEntry for the
// envoy-rls process the test runs on Redis, whose rules are the rendered
// ConfigMap's. The EnvoyFilters are the shipped ones, unchanged, except for
// the Unix-socket path of components/sidecar-uds, which is moved into a
// temporary directory, and docs/deploying.md's Unix-socket EnvoyFilter,
// which gets components/sidecar's HTTP_ROUTE patch as the guide says. Beside them the test adds what a cluster would
// have: a Gateway and a VirtualService that route to a real upstream
// through the ingress gateway, a Sidecar resource that gives the sidecar
// an inbound listener on loopback (captureMode NONE, as iptables would
// otherwise capture), and mTLS turned off (there is no CA). Gateway API
// objects are replaced by the Istio Gateway of the Gateway API gateway's
// proxy (labels gateway.networking.k8s.io/gateway-name), because istiod's
// Gateway API controller needs Kubernetes.
//
// For each manifest set: istiod accepts and pushes (sent = acked in
// /debug/syncz for every type of both proxies), Envoy's config_dump holds
// the rate-limit filter right before the router and the rate_limits, and
// requests through the gateway or the sidecar are limited (429,
// x-envoy-ratelimited) by the rule the manifest's comment names. Two
// gateways with different ISTIO_VERSION get the EnvoyFilter their
// proxyVersion match selects. Deliberately broken copies (a wrong context,
// a virtual host name that matches nothing, a selector that selects
// nothing) fail with a message naming the manifest and what istiod did
// with it.
//
// The package has no runtime code and must not be imported; it reads the
// repository and writes nothing outside temporary directories. It starts
// every process on free loopback ports and never skips: a missing istiod
// or Envoy fails the package.
package istio
