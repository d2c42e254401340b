// Package operator proves the operator's files that are not Kubernetes
// manifests: the Prometheus alert rules (deploy/prometheus, run through
// promtool's own checks and unit tests), that the Helm chart ships the
// same rules, and that docs/runbook.md has a section for every alert. The
// Grafana dashboard's queries are proven against a running envoy-rls in
// test/e2e, and the chart's manifests in test/meshconfig.
//
// The package has no runtime code and must not be imported; it only reads
// the repository's files and runs promtool.
package operator
