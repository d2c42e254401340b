package kubelint

import (
	"testing"
)

// podWithSocket is goodManifests plus a workload whose pod runs its own
// envoy-rls on a Unix socket, with its own (smaller) copy of the rules.
const podWithSocket = goodManifests + `
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-rules, namespace: rls}
data:
  edge.yaml: "domain: edge\n"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: rls}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      securityContext: {runAsNonRoot: true, fsGroup: 65532}
      volumes:
      - name: socket
        emptyDir: {}
      - name: app-rules
        configMap: {name: app-rules}
      containers:
      - name: app
        image: app:1
        ports:
        - {name: http, containerPort: 8080}
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 100m, memory: 64Mi}
        readinessProbe: {httpGet: {path: /, port: http}}
        livenessProbe: {httpGet: {path: /, port: http}}
      - name: envoy-rls
        image: envoy-rls:dev
        env:
        - {name: ENVOY_RLS_GRPC_ADDR, value: "unix:///var/run/rls/rls.sock"}
        - {name: ENVOY_RLS_HTTP_ADDR, value: ":18080"}
        ports:
        - {name: rls-http, containerPort: 18080}
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 100m, memory: 64Mi}
        readinessProbe: {httpGet: {path: /readyz, port: rls-http}}
        livenessProbe: {httpGet: {path: /healthz, port: rls-http}}
        volumeMounts:
        - {name: socket, mountPath: /var/run/rls}
        - {name: app-rules, mountPath: /etc/envoy-rls/config}
`

func TestCheckPodSocketGood(t *testing.T) {
	if err := checkManifests(t, podWithSocket, Options{Rules: testRules()}); err != nil {
		t.Fatal(err)
	}
}

// TestCheckPodSocketBad breaks the in-pod envoy-rls of podWithSocket one way
// at a time.
func TestCheckPodSocketBad(t *testing.T) {
	const (
		grpcEnv     = `- {name: ENVOY_RLS_GRPC_ADDR, value: "unix:///var/run/rls/rls.sock"}`
		socketMount = "- {name: socket, mountPath: /var/run/rls}"
		appRules    = "metadata: {name: app-rules, namespace: rls}\ndata:\n  edge.yaml: \"domain: edge\\n\""
		where       = `Deployment rls/app: containers[1] "envoy-rls"`
	)
	tests := []struct {
		name, old, repl string
		want            []string
	}{
		{"socket directory not mounted", socketMount, "- {name: socket, mountPath: /var/run/other}",
			[]string{where + ": nothing is mounted at the socket directory /var/run/rls"}},
		{"socket directory not an emptyDir", socketMount, "- {name: app-rules, mountPath: /var/run/rls}",
			[]string{where + `: the socket directory /var/run/rls is volume "app-rules", not an emptyDir`}},
		{"socket directory read-only", socketMount, "- {name: socket, mountPath: /var/run/rls, readOnly: true}",
			[]string{where + ": the socket directory /var/run/rls is mounted read-only"}},
		{"relative socket path", grpcEnv, `- {name: ENVOY_RLS_GRPC_ADDR, value: "unix://rls.sock"}`,
			[]string{where + `: ENVOY_RLS_GRPC_ADDR "unix://rls.sock": want unix:///absolute/path`}},
		{"gRPC on TCP without its port", grpcEnv, `- {name: ENVOY_RLS_GRPC_ADDR, value: ":9091"}`,
			[]string{where + ": containerPort 9091 is missing"}},
		{"HTTP port moved without its containerPort", "- {name: rls-http, containerPort: 18080}", "- {name: rls-http, containerPort: 8080}",
			[]string{where + ": containerPort 18080 is missing"}},
		{"HTTP address without a port", `value: ":18080"`, `value: "localhost"`,
			[]string{where + `: ENVOY_RLS_HTTP_ADDR "localhost": want host:port`}},
		{"pod rules that drift", appRules, "metadata: {name: app-rules, namespace: rls}\ndata:\n  edge.yaml: \"domain: edge\\n# x\\n\"",
			[]string{`ConfigMap rls/app-rules: key "edge.yaml" differs from examples/edge.yaml (copy it to the directory its configMapGenerator reads)`}},
		{"pod rules the source lacks", appRules, appRules + "\n  extra.yaml: \"domain: x\\n\"",
			[]string{`ConfigMap rls/app-rules: key "extra.yaml" is not a file of examples`}},
		{"pod rules that do not validate", appRules, "metadata: {name: app-rules, namespace: rls}\ndata:\n  edge.yaml: \"domain: bad\\n\"",
			[]string{"ConfigMap rls/app-rules: rules do not validate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkManifests(t, mutate(t, podWithSocket, tc.old, tc.repl), Options{Rules: testRules()})
			expectMentions(t, err, tc.want)
		})
	}
}
