// Package meshconfig proves, in plain `go test`, the files that ship
// envoy-rls into a mesh: the Dockerfile, the Envoy bootstrap in
// envoy-config/, the Kubernetes and Istio manifests in manifests/istio/ and
// the docker-compose end-to-end setup in test/e2e/.
//
// There is no Docker engine or cluster where the tests run, so every file
// is parsed into the real types that would consume it (test/envoy/validate
// then has a real Envoy load the bootstraps, test/istio a real istiod push
// the EnvoyFilters to real Envoys): Envoy's
// bootstrap/v3 protos (every Any unpacked, every message validated with its
// protoc-gen-validate rules), Istio's EnvoyFilter, the typed Kubernetes API
// objects after an in-process kustomize build, checked by internal/testkit/kubelint.
// A descriptor simulator then computes what the shipped route actions would
// send for sample requests and checks that each descriptor reaches the
// intended rule of the shipped rules, and a mutation test shows that broken
// copies of each file fail with a clear message.
//
// The package has no runtime code and must not be imported; it only reads
// the repository's files and writes nothing outside temporary directories.
package meshconfig
