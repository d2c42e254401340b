package kubelint

import (
	"strings"
	"testing"
)

// goodManifests is a small deployment of envoy-rls and Redis that passes
// every check; each bad case breaks one thing in a copy of it.
const goodManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: rls}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: rules, namespace: rls}
data:
  edge.yaml: "domain: edge\n"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: envoy-rls, namespace: rls}
spec:
  replicas: 2
  selector: {matchLabels: {app: envoy-rls}}
  strategy: {type: RollingUpdate}
  template:
    metadata: {labels: {app: envoy-rls}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      volumes:
      - name: rules
        configMap: {name: rules}
      containers:
      - name: envoy-rls
        image: envoy-rls:dev
        imagePullPolicy: IfNotPresent
        env:
        - {name: ENVOY_RLS_REDIS_URL, value: "redis://redis.rls.svc.cluster.local:6379/0"}
        - {name: ENVOY_RLS_LOG_LEVEL, value: info}
        ports:
        - {name: grpc, containerPort: 8081, protocol: TCP}
        - {name: http, containerPort: 8080}
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
        resources:
          requests: {cpu: 100m, memory: 64Mi}
          limits: {cpu: "1", memory: 256Mi}
        readinessProbe: {httpGet: {path: /readyz, port: http}}
        livenessProbe: {httpGet: {path: /healthz, port: http}}
        volumeMounts:
        - {name: rules, mountPath: /etc/envoy-rls/config}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: redis, namespace: rls}
spec:
  selector: {matchLabels: {app: redis}}
  template:
    metadata: {labels: {app: redis}}
    spec:
      containers:
      - name: redis
        image: redis:7.4
        ports:
        - {name: redis, containerPort: 6379}
        securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, runAsNonRoot: true}
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {cpu: 500m, memory: 128Mi}
        readinessProbe: {tcpSocket: {port: redis}}
        livenessProbe: {tcpSocket: {port: 6379}}
---
apiVersion: v1
kind: Service
metadata: {name: envoy-rls, namespace: rls}
spec:
  selector: {app: envoy-rls}
  ports:
  - {name: grpc, port: 8081, targetPort: grpc, appProtocol: grpc}
  - {name: http, port: 8080, targetPort: http}
---
apiVersion: v1
kind: Service
metadata: {name: redis, namespace: rls}
spec:
  selector: {app: redis}
  ports:
  - {name: tcp-redis, port: 6379}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: envoy-rls, namespace: rls}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: envoy-rls}}
  unhealthyPodEvictionPolicy: AlwaysAllow
`

// testRules is what the rules ConfigMap of goodManifests must hold; its
// Validate rejects any rule file that mentions "bad".
func testRules() Rules {
	return Rules{
		Files:   map[string][]byte{"examples/edge.yaml": []byte("domain: edge\n")},
		Source:  "examples",
		CopyDir: "deploy/rules",
		Validate: func(files map[string][]byte) error {
			for name, data := range files {
				if strings.Contains(string(data), "bad") {
					return &ruleError{name}
				}
			}
			return nil
		},
	}
}

type ruleError struct{ file string }

func (e *ruleError) Error() string { return e.file + ": bad rule" }

// mutate replaces the first old in s by repl, failing when old is absent
// so that a case cannot pass by no longer applying.
func mutate(t *testing.T, s, old, repl string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("mutation target %q not in the manifests", old)
	}
	return strings.Replace(s, old, repl, 1)
}

// expectMentions fails t unless err is an error whose text mentions every
// string of want.
func expectMentions(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want an error mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q:\n%v", w, err)
		}
	}
}

// checkManifests decodes and checks manifests as a caller would.
func checkManifests(t *testing.T, manifests string, opts Options) error {
	t.Helper()
	dec, err := NewDecoder(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := &Objects{}
	if err := dec.DecodeStream("test", []byte(manifests), objs); err != nil {
		return err
	}
	return Check(objs, opts)
}

func TestCheckGood(t *testing.T) {
	if err := checkManifests(t, goodManifests, Options{Rules: testRules()}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckBad(t *testing.T) {
	const (
		rlsReady = "readinessProbe: {httpGet: {path: /readyz, port: http}}"
		rlsSec   = "securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}"
		mount    = "- {name: rules, mountPath: /etc/envoy-rls/config}"
		redisEnv = "redis://redis.rls.svc.cluster.local:6379/0"
		cmMeta   = "metadata: {name: rules, namespace: rls}"
	)
	tests := []struct {
		name, old, repl string
		opts            *Options // nil: the rules of goodManifests
		want            []string
	}{
		// Object metadata.
		{"no name", cmMeta, "metadata: {namespace: rls}", nil, []string{"ConfigMap rls/: metadata.name is required"}},
		{"no namespace", "metadata: {name: redis, namespace: rls}\nspec:\n  selector: {app", "metadata: {name: redis}\nspec:\n  selector: {app", nil,
			[]string{"Service /redis: metadata.namespace is required"}},
		{"namespace nobody creates", "metadata: {name: envoy-rls, namespace: rls}\nspec:\n  minAvailable", "metadata: {name: envoy-rls, namespace: prod}\nspec:\n  minAvailable",
			&Options{ExternalNamespaces: []string{"istio-system", "default"}, Rules: testRules()},
			[]string{`PodDisruptionBudget prod/envoy-rls: namespace "prod" is neither created by the manifests nor one of [default istio-system]`}},

		// Deployments and pods.
		{"selector misses the template", "metadata: {labels: {app: envoy-rls}}", "metadata: {labels: {app: rls}}", nil,
			[]string{"Deployment rls/envoy-rls: spec.selector app=envoy-rls does not match the pod template's labels"}},
		{"no selector", "  selector: {matchLabels: {app: redis}}\n  template", "  template", nil, []string{"Deployment rls/redis: spec.selector is required"}},
		{"bad selector", "selector: {matchLabels: {app: redis}}", "selector: {matchLabels: {app: redis}, matchExpressions: [{key: tier, operator: Near}]}", nil,
			[]string{"Deployment rls/redis: spec.selector: ", `"Near" is not a valid label selector operator`}},
		{"no containers", "---\napiVersion: policy/v1", "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: empty, namespace: rls}\n" +
			"spec:\n  selector: {matchLabels: {app: empty}}\n  template:\n    metadata: {labels: {app: empty}}\n    spec: {containers: []}\n---\napiVersion: policy/v1", nil,
			[]string{"Deployment rls/empty: spec.template.spec.containers is required"}},
		{"unnamed container", "- name: redis\n        image", "- image", nil, []string{`containers[0] "": name is required`}},
		{"bad strategy", "strategy: {type: RollingUpdate}", "strategy: {type: Rolling}", nil,
			[]string{`Deployment rls/envoy-rls: spec.strategy.type: unsupported value "Rolling" (want RollingUpdate|Recreate)`}},
		{"bad seccomp type", "type: RuntimeDefault", "type: Default", nil, []string{"seccompProfile.type", `"Default"`}},
		{"volume of an unknown ConfigMap", "configMap: {name: rules}", "configMap: {name: rulez}", nil,
			[]string{`volume "rules" mounts ConfigMap "rulez", which the manifests do not define in rls`}},
		{"no image", "        image: envoy-rls:dev\n", "", nil, []string{`containers[0] "envoy-rls": image is required`}},
		{"bad pull policy", "imagePullPolicy: IfNotPresent", "imagePullPolicy: Sometimes", nil, []string{"imagePullPolicy", `"Sometimes"`}},
		{"bad container protocol", "protocol: TCP", "protocol: TCPP", nil, []string{"ports.protocol", `"TCPP"`}},
		{"no securityContext", "        " + rlsSec + "\n", "", nil, []string{`"envoy-rls": securityContext is required`}},
		{"writable root", rlsSec, "securityContext: {readOnlyRootFilesystem: false, allowPrivilegeEscalation: false}", nil,
			[]string{"securityContext.readOnlyRootFilesystem must be true"}},
		{"privilege escalation", rlsSec, "securityContext: {readOnlyRootFilesystem: true}", nil,
			[]string{"securityContext.allowPrivilegeEscalation must be false"}},
		{"root", "allowPrivilegeEscalation: false, runAsNonRoot: true}", "allowPrivilegeEscalation: false}", nil,
			[]string{`containers[0] "redis": runAsNonRoot must be true (pod or container)`}},
		{"no cpu request", "requests: {cpu: 50m, memory: 32Mi}", "requests: {memory: 32Mi}", nil, []string{`"redis": resources.requests.cpu is required`}},
		{"no memory limit", "limits: {cpu: 500m, memory: 128Mi}", "limits: {cpu: 500m}", nil, []string{`"redis": resources.limits.memory is required`}},
		{"no readiness probe", "        readinessProbe: {tcpSocket: {port: redis}}\n", "", nil, []string{`"redis": readinessProbe is required`}},
		{"probe on an unnamed port", "readinessProbe: {tcpSocket: {port: redis}}", "readinessProbe: {tcpSocket: {port: redis-port}}", nil,
			[]string{`readinessProbe uses port "redis-port", which the container does not name`}},
		{"bad probe scheme", "livenessProbe: {httpGet: {path: /healthz, port: http}}", "livenessProbe: {httpGet: {path: /healthz, port: http, scheme: TCP}}", nil,
			[]string{"livenessProbe.httpGet.scheme", `"TCP"`}},
		{"env twice", "- {name: ENVOY_RLS_LOG_LEVEL, value: info}", "- {name: ENVOY_RLS_LOG_LEVEL, value: info}\n        - {name: ENVOY_RLS_LOG_LEVEL, value: debug}", nil,
			[]string{"env ENVOY_RLS_LOG_LEVEL is set twice"}},
		{"env value and valueFrom", "- {name: ENVOY_RLS_LOG_LEVEL, value: info}", "- {name: ENVOY_RLS_LOG_LEVEL, value: info, valueFrom: {secretKeyRef: {name: s, key: k}}}", nil,
			[]string{"env ENVOY_RLS_LOG_LEVEL has both value and valueFrom"}},
		{"mount of no volume", mount, mount + "\n        - {name: tmp, mountPath: /tmp}", nil, []string{`volumeMount "tmp" names no volume`}},

		// envoy-rls's own wiring.
		{"wrong readiness path", rlsReady, "readinessProbe: {httpGet: {path: /ready, port: http}}", nil, []string{"readinessProbe must GET /readyz"}},
		{"wrong liveness path", "path: /healthz", "path: /livez", nil, []string{"livenessProbe must GET /healthz"}},
		{"no gRPC port", "- {name: grpc, containerPort: 8081, protocol: TCP}", "- {name: grpc, containerPort: 9091, protocol: TCP}", nil,
			[]string{`"envoy-rls": containerPort 8081 is missing`}},
		{"rules through subPath", mount, "- {name: rules, mountPath: /etc/envoy-rls/config, subPath: edge.yaml}", nil,
			[]string{"the rules mount uses subPath, which never sees ConfigMap updates"}},
		{"rules not mounted", mount, "- {name: rules, mountPath: /etc/rules}", nil,
			[]string{"nothing is mounted at the config directory /etc/envoy-rls/config"}},
		{"config dir moved by its env twin", "- {name: ENVOY_RLS_LOG_LEVEL, value: info}", "- {name: ENVOY_RLS_CONFIG_DIR, value: /rules}", nil,
			[]string{"nothing is mounted at the config directory /rules"}},
		{"rules directory not a ConfigMap", "configMap: {name: rules}", "emptyDir: {}", nil,
			[]string{"the rules directory /etc/envoy-rls/config is not a ConfigMap volume", "no ConfigMap is mounted as the envoy-rls rules directory"}},
		{"Redis URL names no Service", redisEnv, "redis://cache.rls.svc.cluster.local:6379/0", nil,
			[]string{"Deployment rls/envoy-rls: ENVOY_RLS_REDIS_URL: cache.rls.svc.cluster.local:6379 is not a Service and port of these manifests"}},
		{"Redis URL on a port the Service lacks", redisEnv, "redis://redis.rls.svc:6380", nil, []string{"redis.rls.svc:6380 is not a Service and port"}},
		{"Sentinel URL with a host outside", redisEnv, "redis+sentinel://redis.rls.svc:6379,sentinel.example:26379/mymaster", nil,
			[]string{"sentinel.example:26379 is not a Service and port"}},
		{"PDB that blocks drains while Redis is down", "  unhealthyPodEvictionPolicy: AlwaysAllow\n", "", nil,
			[]string{"PodDisruptionBudget rls/envoy-rls: minAvailable without unhealthyPodEvictionPolicy: AlwaysAllow blocks node drains"}},
		{"Redis URL unparsable", redisEnv, "redis://redis.rls.svc:6379/%zz", nil, []string{"ENVOY_RLS_REDIS_URL: parse"}},

		// Services.
		{"bad service type", "spec:\n  selector: {app: redis}", "spec:\n  type: Internal\n  selector: {app: redis}", nil,
			[]string{`Service rls/redis: spec.type: unsupported value "Internal"`}},
		{"service selects nothing", "selector: {app: redis}\n  ports", "selector: {app: cache}\n  ports", nil,
			[]string{"Service rls/redis: selector map[app:cache] selects no Deployment's pods"}},
		{"no service ports", "  ports:\n  - {name: tcp-redis, port: 6379}\n", "", nil, []string{"Service rls/redis: spec.ports is required"}},
		{"service port without a number", "- {name: tcp-redis, port: 6379}", "- {name: tcp-redis, targetPort: redis}", nil,
			[]string{`Service rls/redis: port "tcp-redis": port is required`}},
		{"target the pods lack", "targetPort: grpc,", "targetPort: grpcc,", nil,
			[]string{`Service rls/envoy-rls: port "grpc" targets grpcc, which no container of Deployment envoy-rls exposes`}},
		{"numeric target the pods lack", "- {name: tcp-redis, port: 6379}", "- {name: tcp-redis, port: 6379, targetPort: 6380}", nil,
			[]string{`port "tcp-redis" targets 6380, which no container of Deployment redis exposes`}},
		{"gRPC port without a grpc name", "- {name: grpc, port: 8081", "- {name: rls, port: 8081", nil,
			[]string{`port "rls" targets a gRPC port but its name does not start with "grpc"`}},
		{"gRPC port with another appProtocol", "appProtocol: grpc}", "appProtocol: http}", nil,
			[]string{`port "grpc" targets a gRPC port but appProtocol is "http"`}},

		// PodDisruptionBudgets.
		{"PDB that blocks drains", "minAvailable: 1", "minAvailable: 2", nil,
			[]string{"PodDisruptionBudget rls/envoy-rls: minAvailable 2 with 2 replicas of envoy-rls blocks every node drain"}},
		{"PDB that selects nothing", "  minAvailable: 1\n  selector: {matchLabels: {app: envoy-rls}}", "  minAvailable: 1\n  selector: {matchLabels: {app: rls}}", nil,
			[]string{"PodDisruptionBudget rls/envoy-rls: selector selects no Deployment's pods"}},
		{"PDB without selector", "  minAvailable: 1\n  selector: {matchLabels: {app: envoy-rls}}", "  minAvailable: 1", nil,
			[]string{"PodDisruptionBudget rls/envoy-rls: spec.selector is required"}},
		{"bad eviction policy", "unhealthyPodEvictionPolicy: AlwaysAllow", "unhealthyPodEvictionPolicy: Always", nil,
			[]string{`spec.unhealthyPodEvictionPolicy: unsupported value "Always" (want IfHealthyBudget|AlwaysAllow)`}},

		// The rules ConfigMap.
		{"rules that do not validate", `edge.yaml: "domain: edge\n"`, `edge.yaml: "domain: bad\n"`, nil,
			[]string{"ConfigMap rls/rules: rules do not validate:\nConfigMap rls/rules edge.yaml: bad rule"}},
		{"rules that drift", `edge.yaml: "domain: edge\n"`, `edge.yaml: "domain: edge\n# x\n"`, nil,
			[]string{`ConfigMap rls/rules: key "edge.yaml" differs from examples/edge.yaml (copy it to deploy/rules/)`}},
		{"rule file the source lacks", `edge.yaml: "domain: edge\n"`, `edge.yaml: "domain: edge\n"` + "\n  extra.yaml: \"domain: x\\n\"", nil,
			[]string{`ConfigMap rls/rules: key "extra.yaml" is not a file of examples`}},
		{"rule file missing", `edge.yaml: "domain: edge\n"`, `other.yaml: "domain: edge\n"`, nil,
			[]string{"ConfigMap rls/rules: examples/edge.yaml is missing (copy it to deploy/rules/ and list it in the configMapGenerator)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Rules: testRules()}
			if tc.opts != nil {
				opts = *tc.opts
			}
			err := checkManifests(t, mutate(t, goodManifests, tc.old, tc.repl), opts)
			expectMentions(t, err, tc.want)
		})
	}
}
