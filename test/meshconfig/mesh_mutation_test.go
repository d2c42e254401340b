package meshconfig

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// mutation is a deliberately broken copy of one shipped file, the check
// that must reject it, and fragments its error message must contain.
type mutation struct {
	name  string
	file  string
	old   string
	new   string
	check string
	want  []string
}

// mutations covers each kind of file with an unknown field, a bad enum
// value, a missing required field and a descriptor key that no longer
// matches the rules, plus the wiring mistakes the checks exist for.
var mutations = []mutation{
	// Envoy bootstrap.
	{"envoy: unknown field", "envoy-config/envoy.yaml",
		"failure_mode_deny: false", "failure_mode_denied: false",
		"envoy", []string{"envoy-config/envoy.yaml", "unknown field", "failure_mode_denied"}},
	{"envoy: bad enum", "envoy-config/envoy.yaml",
		"enable_x_ratelimit_headers: DRAFT_VERSION_03", "enable_x_ratelimit_headers: DRAFT_VERSION_04",
		"envoy", []string{"envoy-config/envoy.yaml", "DRAFT_VERSION_04"}},
	{"envoy: bad enum in a typed_config", "envoy-config/envoy.yaml",
		"transport_api_version: V3", "transport_api_version: V4",
		"envoy", []string{"V4"}},
	{"envoy: missing required field", "envoy-config/envoy.yaml",
		"request_headers: {header_name: x-api-tier, descriptor_key: tier}", "request_headers: {descriptor_key: tier}",
		"envoy", []string{"rate_limits[2].actions[0]", "HeaderName"}},
	{"envoy: missing required field in an Any", "envoy-config/envoy.yaml",
		"cluster_name: envoy_rls\n", "\n",
		"envoy", []string{"typed_config<RateLimit>.rate_limit_service.grpc_service", "TargetSpecifier: value is required"}},
	{"envoy: descriptor key mismatch", "envoy-config/envoy.yaml",
		"request_headers: {header_name: x-user-id, descriptor_key: user_id}", "request_headers: {header_name: x-user-id, descriptor_key: userid}",
		"envoy", []string{`("userid", "alice")`, `want [("user_id", "alice")]`}},
	{"envoy: rate-limit cluster without HTTP/2", "envoy-config/envoy.yaml",
		"http2_protocol_options:\n            connection_keepalive: {interval: 30s, timeout: 5s}\n", "http_protocol_options: {}\n",
		"envoy", []string{`cluster "envoy_rls"`, "HTTP/2"}},
	{"envoy: Unix socket cluster without HTTP/2", "envoy-config/envoy.yaml",
		"http2_protocol_options:\n            connection_keepalive: {interval: 30s, timeout: 5s}\n    load_assignment:\n      cluster_name: envoy_rls_uds", "http_protocol_options: {}\n    load_assignment:\n      cluster_name: envoy_rls_uds",
		"envoy", []string{`cluster "envoy_rls_uds"`, "HTTP/2"}},
	{"envoy: keepalive pings faster than envoy-rls allows", "envoy-config/envoy.yaml",
		"connection_keepalive: {interval: 30s, timeout: 5s}", "connection_keepalive: {interval: 2s, timeout: 1s}",
		"envoy", []string{`cluster "envoy_rls"`, "--grpc-keepalive-min-time"}},
	{"envoy: router before the rate-limit filter", "envoy-config/envoy.yaml",
		"- name: envoy.filters.http.ratelimit\n", "- name: envoy.filters.http.router\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n          - name: envoy.filters.http.ratelimit\n",
		"envoy", []string{"must come before"}},
	{"envoy: route-level limits drop the virtual host's", "envoy-config/envoy.yaml",
		"vh_rate_limits: INCLUDE", "vh_rate_limits: OVERRIDE",
		"envoy", []string{"login", "produce 1 descriptors"}},
	{"rules: route value typo leaves the login route without its rule", "examples/config/edge.yaml",
		"value: login\n    rate_limit:\n      name: login_path", "value: logon\n    rate_limit:\n      name: login_path",
		"envoy", []string{`("route", "login")`, "matches no rule", "edge.route_login"}},
	{"rules: renamed key leaves a descriptor without a rule", "examples/config/edge.yaml",
		"  - key: generic_key\n    value: login", "  - key: generic\n    value: login",
		"envoy", []string{`("generic_key", "login")`, "matches no rule", "edge.generic_key_login.remote_address"}},
	{"rules: unknown domain", "examples/config/edge.yaml",
		"domain: edge", "domain: edges",
		"envoy", []string{`domain "edge" is not in the rules`}},

	// Istio EnvoyFilter.
	{"envoyfilter: unknown spec field", "manifests/istio/envoyfilter-gateway.yaml",
		"  workloadSelector:", "  workloadSelectors:",
		"manifests", []string{"envoy-rls-gateway", "unknown field", "workloadSelectors"}},
	{"envoyfilter: unknown field in a patch value", "manifests/istio/envoyfilter-gateway.yaml",
		"descriptor_key: tier}", "descriptor_kee: tier}",
		"manifests", []string{"configPatches[1] (VIRTUAL_HOST)", "unknown field", "descriptor_kee"}},
	{"envoyfilter: bad operation", "manifests/istio/envoyfilter-gateway.yaml",
		"operation: INSERT_BEFORE", "operation: INSERT_BEFOR",
		"manifests", []string{"envoy-rls-gateway", "INSERT_BEFOR"}},
	{"envoyfilter: bad enum in a patch value", "manifests/istio/envoyfilter-gateway.yaml",
		"vh_rate_limits: INCLUDE", "vh_rate_limits: INCLUDES",
		"manifests", []string{"configPatches[2] (HTTP_ROUTE)", "INCLUDES"}},
	{"envoyfilter: missing required field in a merged rate limit", "manifests/istio/envoyfilter-gateway.yaml",
		"request_headers: {header_name: x-api-tier, descriptor_key: tier}", "request_headers: {descriptor_key: tier}",
		"manifests", []string{"VirtualHost.rate_limits[2]", "HeaderName"}},
	{"envoyfilter: missing required field in the inserted filter", "manifests/istio/envoyfilter-gateway.yaml",
		"domain: edge\n", "\n",
		"manifests", []string{"configPatches[0] (HTTP_FILTER)", "Domain"}},
	{"envoyfilter: no priority", "manifests/istio/envoyfilter-gateway.yaml",
		"  priority: 10\n", "",
		"manifests", []string{"envoy-rls-gateway", "spec.priority must be set"}},
	{"envoyfilter: descriptor key mismatch", "manifests/istio/envoyfilter-gateway.yaml",
		"request_headers: {header_name: x-user-id, descriptor_key: user_id}", "request_headers: {header_name: x-user-id, descriptor_key: userid}",
		"manifests", []string{"envoy-rls-gateway", `("userid", "alice")`}},
	{"envoyfilter: rate-limit service port that does not exist", "manifests/istio/envoyfilter-gateway.yaml",
		"outbound|8081||envoy-rls", "outbound|9091||envoy-rls",
		"manifests", []string{"has no port 9091"}},
	{"envoyfilter: route patch that selects no route", "manifests/istio/envoyfilter-gateway.yaml",
		"name: login\n", "name: signin\n",
		"manifests", []string{"selects no route"}},
	{"envoyfilter: sidecar bad context", "manifests/istio/components/sidecar/envoyfilter-sidecar.yaml",
		"context: SIDECAR_INBOUND", "context: SIDECAR_INBOUD",
		"manifests", []string{"envoy-rls-sidecar", "SIDECAR_INBOUD"}},
	{"envoyfilter: sidecar descriptor key mismatch", "manifests/istio/components/sidecar/envoyfilter-sidecar.yaml",
		"request_headers: {header_name: x-tenant-id, descriptor_key: tenant}", "request_headers: {header_name: x-tenant-id, descriptor_key: tenants}",
		"manifests", []string{"envoy-rls-sidecar", `("tenants", "acme")`}},

	// Kubernetes objects and kustomize.
	{"kube: unknown (miscapitalised) field", "manifests/istio/deployment.yaml",
		"readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true",
		"manifests", []string{"strict decoding error", "readOnlyRootFileSystem"}},
	{"kube: duplicate field", "manifests/istio/deployment.yaml",
		"  replicas: 2\n", "  replicas: 2\n  replicas: 3\n",
		"manifests", []string{"replicas"}},
	{"kube: bad enum", "manifests/istio/deployment.yaml",
		"type: RollingUpdate", "type: Rolling",
		"manifests", []string{"Deployment envoy-rls/envoy-rls", "spec.strategy.type", `"Rolling"`}},
	{"kube: bad protocol", "manifests/istio/service.yaml",
		"protocol: TCP", "protocol: TCPP",
		"manifests", []string{"Service envoy-rls/envoy-rls", `"TCPP"`}},
	{"kube: missing required field", "manifests/istio/deployment.yaml",
		"        image: envoy-rls\n", "",
		"manifests", []string{`containers[0] "envoy-rls"`, "image is required"}},
	{"kube: service targets a port the pods do not have", "manifests/istio/service.yaml",
		"targetPort: grpc", "targetPort: grpcc",
		"manifests", []string{`port "grpc" targets grpcc`}},
	{"kube: gRPC port without a grpc name", "manifests/istio/service.yaml",
		"  - name: grpc\n", "  - name: rls\n",
		"manifests", []string{`port "rls"`, `does not start with "grpc"`}},
	{"kube: wrong readiness path", "manifests/istio/deployment.yaml",
		"path: /readyz", "path: /ready",
		"manifests", []string{"readinessProbe must GET /readyz"}},
	{"kube: PDB that blocks drains", "manifests/istio/pdb.yaml",
		"minAvailable: 1", "minAvailable: 2",
		"manifests", []string{"blocks every node drain"}},
	{"kube: Redis URL names no Service", "manifests/istio/deployment.yaml",
		"redis://redis.envoy-rls.svc", "redis://redis.envoy-rlz.svc",
		"manifests", []string{"ENVOY_RLS_REDIS_URL", "is not a Service"}},
	{"kube: rules mounted with subPath", "manifests/istio/deployment.yaml",
		"          mountPath: /etc/envoy-rls/config\n", "          mountPath: /etc/envoy-rls/config\n          subPath: edge.yaml\n",
		"manifests", []string{"subPath"}},
	{"kube: environment variable that names no flag", "manifests/istio/deployment.yaml",
		"name: ENVOY_RLS_SHUTDOWN_DELAY", "name: ENVOY_RLS_SHUTDOWN_DELAYS",
		"manifests", []string{"ENVOY_RLS_SHUTDOWN_DELAYS is the twin of no envoy-rls flag"}},
	{"kustomize: missing resource", "manifests/istio/kustomization.yaml",
		"- pdb.yaml", "- pdbs.yaml",
		"manifests", []string{`resources entry "pdbs.yaml" does not exist`}},
	{"kustomize: unknown field", "manifests/istio/kustomization.yaml",
		"configMapGenerator:", "configMapGenerators:",
		"manifests", []string{"manifests/istio/kustomization.yaml", "configMapGenerators"}},
	{"kustomize: multi-document patch", "manifests/istio/components/managed-redis/drop-demo-redis-service.yaml",
		"$patch: delete\n", "$patch: delete\napiVersion: v1\nkind: Service\nmetadata:\n  name: other\n  namespace: envoy-rls\n---\n$patch: delete\n",
		"manifests", []string{"holds 2 documents"}},
	{"configmap: rules that do not validate", "manifests/istio/rules/edge.yaml",
		"unit: second\n      requests_per_unit: 50", "unit: sec\n      requests_per_unit: 50",
		"manifests", []string{"ConfigMap envoy-rls/envoy-rls-config", "rules do not validate", "descriptors[0].rate_limit.unit"}},
	{"configmap: rules that drift from examples/config", "manifests/istio/rules/internal.yaml",
		"requests_per_unit: 100\n", "requests_per_unit: 101\n",
		"manifests", []string{`key "internal.yaml" differs from examples/config/internal.yaml`}},

	// envoy-rls in the workload's pod, on a Unix socket (components/sidecar-uds).
	{"uds: socket path the cluster does not dial", udsWorkloadRel,
		"value: unix:///var/run/envoy-rls/rls.sock", "value: unix:///var/run/envoy-rls/grpc.sock",
		"uds", []string{"ENVOY_RLS_GRPC_ADDR", "want unix:///var/run/envoy-rls/rls.sock"}},
	{"uds: istio-proxy mounts the socket elsewhere", udsWorkloadRel,
		`{"mountPath":"/var/run/envoy-rls"}`, `{"mountPath":"/var/run/rls"}`,
		"uds", []string{"istio-proxy mounts volume \"envoy-rls-socket\" at \"/var/run/rls\""}},
	{"uds: no fsGroup", udsWorkloadRel,
		"fsGroup: 65532", "supplementalGroups: [65532]",
		"uds", []string{"no pod fsGroup"}},
	{"uds: socket directory not an emptyDir", udsWorkloadRel,
		"emptyDir: {}", "configMap: {name: envoy-rls-config}",
		"uds", []string{"the socket directory /var/run/envoy-rls is volume \"envoy-rls-socket\", not an emptyDir"}},
	{"uds: HTTP port without its containerPort", udsWorkloadRel,
		"containerPort: 18080", "containerPort: 8080",
		"uds", []string{"containerPort 18080 is missing"}},
	{"uds: environment variable that names no flag", udsWorkloadRel,
		"ENVOY_RLS_GRPC_MAX_CONNECTION_AGE_GRACE", "ENVOY_RLS_GRPC_MAX_CONNECTION_GRACE",
		"uds", []string{"ENVOY_RLS_GRPC_MAX_CONNECTION_GRACE is the twin of no envoy-rls flag"}},
	{"uds: filter names a cluster no patch adds", udsFilterRel,
		"    cluster_name: envoy_rls_uds\n# The cluster", "    cluster_name: envoy_rls_sock\n# The cluster",
		"uds", []string{`cluster "envoy_rls_sock"`, "nor one a CLUSTER patch of this EnvoyFilter adds"}},
	{"uds: socket cluster without HTTP/2", udsFilterRel,
		"http2_protocol_options:\n                connection_keepalive: {interval: 30s, timeout: 5s}", "http_protocol_options: {}",
		"uds", []string{`cluster "envoy_rls_uds"`, "HTTP/2"}},
	{"uds: unknown field in the cluster", udsFilterRel,
		"connect_timeout: 1s", "conect_timeout: 1s",
		"uds", []string{"conect_timeout"}},
	{"uds: sidecar EnvoyFilter's patches moved", udsFilterRel,
		"path: /spec/configPatches/0/applyTo", "path: /spec/configPatches/1/applyTo",
		"uds", []string{"kustomize build", "configPatches/1/applyTo"}},
	{"uds: pod patch aimed at another workload", udsComponentDir + "/kustomization.yaml",
		"    name: httpbin\n", "    name: productpage\n",
		"uds", []string{"no container named envoy-rls: nothing serves the socket /var/run/envoy-rls/rls.sock"}},
	{"uds: sidecar EnvoyFilter selects no pod", "manifests/istio/components/sidecar/envoyfilter-sidecar.yaml",
		"      app: httpbin\n", "      app: reviews\n",
		"uds", []string{"its workloadSelector selects 0 Deployments' pods in default"}},
	{"uds: rules copy drifts from examples/config", udsComponentDir + "/rules/internal.yaml",
		"requests_per_unit: 100\n", "requests_per_unit: 101\n",
		"uds", []string{`ConfigMap default/envoy-rls-config: key "internal.yaml" differs from examples/config/internal.yaml`}},

	// docker-compose.
	{"compose: unknown field", composeRel,
		"    healthcheck:", "    healthchek:",
		"compose", []string{"unknown field", "healthchek"}},
	{"compose: bad depends_on condition", composeRel,
		"condition: service_healthy", "condition: healthy",
		"compose", []string{"depends_on", `"healthy"`}},
	{"compose: build context is not the repository", composeRel,
		"context: ../..", "context: ..",
		"compose", []string{"not the repository root"}},
	{"compose: upstream renamed away from Envoy's cluster address", composeRel,
		"  echo:\n", "  upstream:\n",
		"compose", []string{`service "echo" is missing`}},
	{"compose: environment variable that names no flag", composeRel,
		"ENVOY_RLS_RESPONSE_HEADERS:", "ENVOY_RLS_RESPONSE_HEADER:",
		"compose", []string{"ENVOY_RLS_RESPONSE_HEADER is the twin of no envoy-rls flag"}},
	{"compose: unpinned image", composeRel,
		"image: redis:7.4-alpine", "image: redis",
		"compose", []string{`image "redis" must name a fixed tag`}},

	// Dockerfile and .dockerignore.
	{"docker: no -trimpath", "Dockerfile",
		"go build -trimpath", "go build",
		"image", []string{`lacks "-trimpath"`}},
	{"docker: cgo on", "Dockerfile",
		"    CGO_ENABLED=0 go build", "    go build",
		"image", []string{`lacks "CGO_ENABLED=0"`}},
	{"docker: named user", "Dockerfile",
		"USER 65532:65532", "USER nonroot:nonroot",
		"image", []string{"numeric non-root uid"}},
	{"docker: one port", "Dockerfile",
		"EXPOSE 8081 8080", "EXPOSE 8081",
		"image", []string{"want 8081 8080"}},
	{"docker: shell-form entrypoint", "Dockerfile",
		`ENTRYPOINT ["/usr/local/bin/envoy-rls"]`, `ENTRYPOINT /usr/local/bin/envoy-rls`,
		"image", []string{"exec form"}},
	{"dockerignore: drops the command", ".dockerignore",
		"!cmd/\n", "",
		"image", []string{"excludes cmd/envoy-rls/main.go"}},
	{"dockerignore: drops the example rules", ".dockerignore",
		"!examples/config/\n", "",
		"image", []string{"COPY source examples/config/ is excluded"}},

	// The operator's components.
	{"pdb: blocks drains while Redis is down", "manifests/istio/pdb.yaml",
		"  unhealthyPodEvictionPolicy: AlwaysAllow\n", "",
		"manifests", []string{"PodDisruptionBudget envoy-rls/envoy-rls", "AlwaysAllow"}},
	{"gateway-api: targetRefs names a Service", "manifests/istio/components/gateway-api/envoyfilter-targetref.yaml",
		"    kind: Gateway\n", "    kind: Service\n",
		"operator", []string{"spec.targetRefs[0]", "want a gateway.networking.k8s.io Gateway"}},
	{"gateway-api: login descriptor lost on queries", "manifests/istio/components/gateway-api/envoyfilter-targetref.yaml",
		`regex: "/api/login([/?].*)?"`, `regex: "/api/login"`,
		"operator", []string{`"login with a query`, `("generic_key", "login")`}},
	{"gateway-api: route to a Gateway that is not there", "manifests/istio/components/gateway-api/gateway.yaml",
		"  - name: edge\n    namespace: istio-system", "  - name: public\n    namespace: istio-system",
		"operator", []string{"HTTPRoute default/edge: parentRefs[0] istio-system/public is not a Gateway"}},
	{"network-policy: admits a port the pods do not name", "manifests/istio/components/network-policy/networkpolicy.yaml",
		"    - port: grpc\n", "    - port: grpc-tls\n",
		"operator", []string{`admits port "grpc-tls"`}},
	{"hpa: minimum at the budget's", "manifests/istio/components/hpa/hpa.yaml",
		"minReplicas: 2", "minReplicas: 1",
		"operator", []string{"minReplicas 1 with PodDisruptionBudget envoy-rls minAvailable 1"}},
	{"hpa: replicas left in the Deployment", "manifests/istio/components/hpa/deployment-no-replicas.yaml",
		"  replicas: null", "  replicas: 3",
		"operator", []string{"Deployment envoy-rls sets spec.replicas"}},

	// The e2e script.
	{"script: unquoted expansion", e2eScriptRel,
		`docker compose -p "$project" -f "$compose_file" "$@"`, `docker compose -p "$project" -f $compose_file "$@"`,
		"scripts", []string{"SC2086"}},
}

// The files of components/sidecar-uds that mutations break.
const (
	udsComponentDir = manifestsDir + "/" + udsComponent
	udsWorkloadRel  = udsComponentDir + "/workload-envoy-rls.yaml"
	udsFilterRel    = udsComponentDir + "/envoyfilter-uds.yaml"
)

func TestMutatedCopiesFailValidation(t *testing.T) {
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			check, ok := fileChecks[m.check]
			if !ok {
				t.Fatalf("unknown check %q", m.check)
			}
			o := overrides{m.file: mutate(t, childproc.ReadRepoFile(t, m.file), m.old, m.new)}
			err := check(t, o)
			wantErr(t, err, m.want...)
			t.Logf("rejected as expected:\n%v", err)
		})
	}
}
