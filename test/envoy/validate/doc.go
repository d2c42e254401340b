// Package validate has a real Envoy (internal/testkit/envoytest, `envoy --mode
// validate`) judge every bootstrap the repository ships: every bootstrap
// YAML file (envoy-config/envoy.yaml, and any other found outside bin/ and
// testdata/), and checks what Envoy does not: the rate-limit filter sits
// right before the router and its rate-limit service is a cluster of the
// proxy. Deliberately broken copies must fail with Envoy's own message.
//
// The shipped Istio EnvoyFilters are not judged here: where their patches
// land only istiod knows, and test/istio has a real istiod push them to
// real Envoys.
//
// The package has no runtime code and must not be imported; it reads the
// repository and writes nothing outside temporary directories.
package validate
