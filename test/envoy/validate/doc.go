// Package validate has a real Envoy (internal/testkit/envoytest, `envoy --mode
// validate`) judge everything the repository ships for Envoy: every
// bootstrap YAML file (envoy-config/envoy.yaml, and any other found
// outside bin/ and testdata/), every Istio EnvoyFilter of the
// kustomize base manifests/istio and of each of its components, the
// EnvoyFilters the Helm chart charts/envoy-rls renders over its values
// sets, and the complete bootstraps and EnvoyFilters the guides show.
//
// An EnvoyFilter is not a bootstrap: its patches are applied (by
// internal/testkit/istiopatch, as istiod applies them) to a minimal bootstrap of
// the proxy it is for, a sidecar's or a gateway's, shaped and named the
// way istiod generates them, with a cluster for every Service port the
// manifests define. Envoy then decides whether it would load the result.
// Deliberately broken copies of the shipped files must fail with Envoy's
// own message.
//
// The package has no runtime code and must not be imported; it reads the
// repository and writes nothing outside temporary directories.
package validate
