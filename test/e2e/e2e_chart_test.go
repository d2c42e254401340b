package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
)

// chartPod is what the chart's Deployment gives the envoy-rls container:
// its environment, and its volumes as directories of files.
type chartPod struct {
	env []corev1.EnvVar
	// mounts maps each mount path to a directory holding the volume's
	// files.
	mounts map[string]string
}

// renderChartPod renders the chart with helm template and lays out the
// envoy-rls container's volumes in temporary directories: ConfigMaps of
// the render with their data, Secrets with the files in secrets (volume
// name → file → contents), as the kubelet would.
func renderChartPod(t *testing.T, secrets map[string]map[string]string, args ...string) chartPod {
	t.Helper()
	// helm runs in the repository root: paths in args are relative to it.
	out, err := shipped.Helm(childproc.Root(), t.TempDir(),
		append([]string{"template", "envoy-rls", shipped.ChartDir, "--namespace", "envoy-rls", "--kube-version", "1.31.0"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	configMaps := map[string]map[string]string{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		switch meta.Kind {
		case "Deployment":
			dep = &appsv1.Deployment{}
			if err := yaml.UnmarshalStrict([]byte(doc), dep); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			configMaps[cm.Name] = cm.Data
		}
	}
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("helm template rendered no Deployment with one container:\n%s", out)
	}
	files := map[string]map[string]string{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			files[v.Name] = configMaps[v.ConfigMap.Name]
		case v.Secret != nil:
			files[v.Name] = secrets[v.Name]
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	pod := chartPod{env: c.Env, mounts: map[string]string{}}
	for _, m := range c.VolumeMounts {
		dir := t.TempDir()
		for name, data := range files[m.Name] {
			writeFile(t, filepath.Join(dir, name), data)
		}
		pod.mounts[m.MountPath] = dir
	}
	return pod
}

// environ turns the container's env into KEY=value entries as the kubelet
// does: a secretKeyRef from secrets ("secret/key" → value), $(VAR) of a
// variable defined before expanded, and the mount paths replaced by their
// directories.
func (p chartPod) environ(t *testing.T, secrets map[string]string) []string {
	t.Helper()
	var out []string
	defined := map[string]string{}
	for _, e := range p.env {
		v := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			val, ok := "", false
			if ref != nil {
				val, ok = secrets[ref.Name+"/"+ref.Key]
			}
			if !ok {
				t.Fatalf("env %s comes from %v; give this test its value", e.Name, e.ValueFrom)
			}
			v = val
		}
		for name, val := range defined {
			v = strings.ReplaceAll(v, "$("+name+")", val)
		}
		for mount, dir := range p.mounts {
			v = strings.ReplaceAll(v, mount, dir)
		}
		defined[e.Name] = v
		out = append(out, e.Name+"="+v)
	}
	return out
}

// TestChartEnvServes runs the real binary with the environment the Helm
// chart gives its container (on a real Redis, with the admin token from
// its Secret and the rules from its ConfigMap): every value must be one
// the binary takes, and the wiring must work, a decision and the admin
// API included. Only the listen addresses are moved to loopback.
func TestChartEnvServes(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	const token = "chart-token"
	pod := renderChartPod(t, map[string]map[string]string{"admin-token": {"token": token + "\n"}},
		"--set", "redis.addresses={"+r.Addr+"}",
		"--set", "debug.adminToken.enabled=true", "--set", "debug.adminToken.secretName=envoy-rls-admin",
		"--set-file", `rules.files.edge\.yaml=examples/config/edge.yaml`)
	s := startServer(t, serveOpts{Env: pod.environ(t, nil)})

	if got := s.ask("edge", desc("remote_address", "203.0.113.7")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("a first request from an IP: code %v, want OK", got)
	}
	if got := s.ask("edge", desc("remote_address", "192.0.2.66")).GetOverallCode(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the blocked IP: code %v, want OVER_LIMIT", got)
	}
	tok := filepath.Join(pod.mounts["/etc/envoy-rls/admin"], "token")
	if out, stderr, code := s.overrideCLI(t, tok, "list"); code != 0 {
		t.Errorf("override list with the chart's token file: exit %d\n%s%s", code, out, stderr)
	}
	if _, _, code := s.overrideCLI(t, tokenFile(t, "wrong"), "list"); code == 0 {
		t.Error("override list with a wrong token succeeded; the admin API is not behind the chart's token")
	}
	if !strings.Contains(s.logs.String(), `"backend":"redis"`) {
		t.Errorf("not serving on Redis; logs:\n%s", s.logs)
	}
}

// TestChartEnvServesXDS is TestChartEnvServes for the chart's xDS values:
// rules from a real management server, on the in-process store.
func TestChartEnvServesXDS(t *testing.T) {
	t.Parallel()
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(0))
	pod := renderChartPod(t, nil,
		"--set", "rules.source=xds", "--set", "xds.server="+cp.Addr, "--set", "xds.nodeId="+xdsNode,
		"--set", "redis.mode=memory")
	if _, ok := pod.mounts["/etc/envoy-rls/config"]; ok {
		t.Error("the xDS render mounts a rules directory")
	}
	s := startServer(t, serveOpts{Env: pod.environ(t, nil)})
	s.awaitCode(t, "the pushed rule (0 a minute) decides", pb.RateLimitResponse_OVER_LIMIT)
	if !strings.Contains(s.logs.String(), `"backend":"memory"`) {
		t.Errorf("not serving on the in-process store; logs:\n%s", s.logs)
	}
}

// TestChartEnvServesTLSRedis is TestChartEnvServes for Redis over mutual
// TLS with an ACL user whose password comes from a Secret: the chart's
// rediss:// URL, the $(RLS_REDIS_PASSWORD) expansion and the mounted TLS
// files must get the binary a working connection.
func TestChartEnvServesTLSRedis(t *testing.T) {
	t.Parallel()
	r := redistest.StandaloneTLS(t)
	const user, password = "rls", "chart-s3cret"
	if err := r.Client(t).Do(context.Background(), "ACL", "SETUSER", user, "on", ">"+password, "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		t.Helper()
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	f := r.TLSFiles()
	pod := renderChartPod(t, map[string]map[string]string{"redis-tls": {"ca.crt": read(f.CAFile), "tls.crt": read(f.CertFile), "tls.key": read(f.KeyFile)}},
		"--set", "redis.addresses={"+r.TLSAddr+"}", "--set", "redis.username="+user,
		"--set", "redis.passwordSecret.name=envoy-rls-redis",
		"--set", "redis.tls.enabled=true", "--set", "redis.tls.secretName=envoy-rls-redis-tls", "--set", "redis.tls.clientCert=true",
		"--set-file", `rules.files.edge\.yaml=examples/config/edge.yaml`)
	s := startServer(t, serveOpts{Env: pod.environ(t, map[string]string{"envoy-rls-redis/password": password})})
	if got := s.ask("edge", desc("remote_address", "192.0.2.66")).GetOverallCode(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the blocked IP: code %v, want OVER_LIMIT", got)
	}
	// The decision came from Redis: the user's connection is there.
	clients, err := r.Client(t).Do(context.Background(), "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(clients, "user="+user) {
		t.Errorf("no Redis connection as user %s:\n%s", user, clients)
	}
}
