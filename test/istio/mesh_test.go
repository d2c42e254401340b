package istio

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

var binPath string

func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath,
		envoytest.Installed,
		func() error { _, err := istiodBinary(); return err })
}

// udsPath is the socket components/sidecar-uds points the sidecar at, in
// the pod; the test moves it into a temporary directory.
const udsPath = "/var/run/envoy-rls/rls.sock"

// object is one Kubernetes object of a rendered manifest stream.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`
	// raw is the whole object, as JSON.
	raw []byte
}

func (o object) String() string {
	return fmt.Sprintf("%s %s/%s", o.Kind, o.Metadata.Namespace, o.Metadata.Name)
}

func parseObjects(where string, stream []byte) ([]object, error) {
	docs, err := kubelint.SplitYAML(stream)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var out []object
	for _, doc := range docs {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if string(js) == "null" {
			continue
		}
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		o.raw = js
		out = append(out, o)
	}
	return out, nil
}

// istioKind reports whether istiod reads the object from its config
// directory as it is: Istio's networking and security resources.
func istioKind(o object) bool {
	return strings.HasPrefix(o.APIVersion, "networking.istio.io/") || strings.HasPrefix(o.APIVersion, "security.istio.io/")
}

// manifestSet is one set of manifests as a user applies them, and the
// proxies of the cluster it is applied to.
type manifestSet struct {
	// Name names the set in messages: "kustomize base", "helm template
	// sentinel-values", "docs/deploying.md block 3".
	Name    string
	Objects []object
	// Gateways are the ingress gateways the set's gateway EnvoyFilters
	// are for (each gets its own Gateway resource and port).
	Gateways []proxySpec
	// Sidecar is the workload whose sidecar the set patches; nil when none.
	Sidecar *proxySpec
}

// envoyFilters are the set's EnvoyFilters.
func (s manifestSet) envoyFilters() []object {
	var out []object
	for _, o := range s.Objects {
		if o.Kind == "EnvoyFilter" {
			out = append(out, o)
		}
	}
	return out
}

// mesh is one set applied: istiod on its config directory, the gateway's
// and the sidecar's Envoys, envoy-rls on Redis behind a ServiceEntry, and
// a real upstream behind both.
type mesh struct {
	Set      manifestSet
	Istiod   *istiod
	Gateways []*proxy
	Sidecar  *proxy
	Upstream *envoytest.Upstream
	// GatewayPorts are the gateways' listener ports; SidecarPort is the
	// sidecar's inbound listener's (all on 127.0.0.1).
	GatewayPorts []int
	SidecarPort  int
	// ConfigDir is istiod's --configDir.
	ConfigDir string
	// Limited records each traffic check that passed.
	Limited []string
	// Rules is envoy-rls's rules directory.
	Rules string
}

// startMesh starts everything for one set; it fails t only on the
// harness's own trouble. When istiod refuses the set's manifests, the
// error names the set and says what istiod said.
func startMesh(t *testing.T, set manifestSet) (*mesh, error) {
	t.Helper()
	m := &mesh{Set: set, Upstream: envoytest.StartUpstream(t), ConfigDir: t.TempDir()}
	redis := redistest.Standalone(t)
	rules, err := rulesDir(t, set)
	if err != nil {
		t.Fatal(err)
	}
	m.Rules = rules
	rlsArgs := func(grpcAddr string) []string {
		return []string{"serve", "--config-dir", rules, "--grpc-addr", grpcAddr,
			"--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
			"--redis-url", "redis://" + redis.Addr, "--redis-timeout=2s"}
	}
	rls := rlsproc.Start(t, binPath, rlsArgs("127.0.0.1:0"), nil)
	sock := ""
	for _, f := range set.envoyFilters() {
		if strings.Contains(string(f.raw), udsPath) {
			dir, err := os.MkdirTemp("", "rls-uds-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock = filepath.Join(dir, "rls.sock")
			rlsproc.Start(t, binPath, rlsArgs("unix://"+sock), nil)
			break
		}
	}
	ports, err := childproc.FreePorts(2 + len(set.Gateways))
	if err != nil {
		t.Fatal(err)
	}
	inPort, outPort := ports[0], ports[1]
	m.GatewayPorts, m.SidecarPort = ports[2:], inPort
	files := map[string][]byte{}
	add := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	for _, o := range set.Objects {
		switch {
		case istioKind(o):
			raw := o.raw
			if sock != "" {
				raw = []byte(strings.ReplaceAll(string(raw), udsPath, sock))
			}
			files[fmt.Sprintf("shipped-%s-%s-%s.yaml", strings.ToLower(o.Kind), o.Metadata.Namespace, o.Metadata.Name)] = raw
		case o.Kind == "Service":
			se, err := serviceEntry(o, rls)
			if err != nil {
				t.Fatalf("%s: %v", set.Name, err)
			}
			if se != nil {
				add(fmt.Sprintf("service-%s-%s.yaml", o.Metadata.Namespace, o.Metadata.Name), se)
			}
		}
	}
	// What a cluster would have around the manifests.
	add("mesh-peerauthentication.yaml", resource("security.istio.io/v1", "PeerAuthentication", rootNamespace, "default",
		map[string]any{"mtls": map[string]any{"mode": "DISABLE"}}))
	_, upPort, _ := strings.Cut(m.Upstream.Addr, ":")
	add("upstream-serviceentry.yaml", resource("networking.istio.io/v1", "ServiceEntry", "default", "httpbin", map[string]any{
		"hosts":      []string{"httpbin.default.svc.cluster.local"},
		"location":   "MESH_INTERNAL",
		"resolution": "STATIC",
		"ports":      []any{map[string]any{"number": 8000, "name": "http", "protocol": "HTTP"}},
		"endpoints":  []any{map[string]any{"address": "127.0.0.1", "ports": map[string]any{"http": mustAtoi(t, upPort)}}},
	}))
	var gatewayRefs []string
	for i, g := range set.Gateways {
		name := fmt.Sprintf("test-gateway-%d", i)
		add(name+".yaml", resource("networking.istio.io/v1", "Gateway", g.Namespace, name, map[string]any{
			"selector": g.Labels,
			"servers": []any{map[string]any{
				"port": map[string]any{"number": m.GatewayPorts[i], "name": "http", "protocol": "HTTP"},
				"bind": "127.0.0.1", "hosts": []string{"*"},
			}},
		}))
		gatewayRefs = append(gatewayRefs, g.Namespace+"/"+name)
	}
	if len(set.Gateways) > 0 {
		route := []any{map[string]any{"destination": map[string]any{"host": "httpbin.default.svc.cluster.local", "port": map[string]any{"number": 8000}}}}
		// The route named "login" is the one docs/deploying.md has users
		// name, and the gateway EnvoyFilter's HTTP_ROUTE patch matches.
		add("gateway-virtualservice.yaml", resource("networking.istio.io/v1", "VirtualService", set.Gateways[0].Namespace, "test-routes", map[string]any{
			"hosts":    []string{"*"},
			"gateways": gatewayRefs,
			"http": []any{
				map[string]any{"name": "login", "match": []any{map[string]any{"uri": map[string]any{"prefix": "/api/login"}}}, "route": route},
				map[string]any{"name": "default", "route": route},
			},
		}))
	}
	if s := set.Sidecar; s != nil {
		add("sidecar.yaml", resource("networking.istio.io/v1", "Sidecar", s.Namespace, "test-capture-none", map[string]any{
			"workloadSelector": map[string]any{"labels": s.Labels},
			"ingress": []any{map[string]any{
				"port":            map[string]any{"number": inPort, "name": "http", "protocol": "HTTP"},
				"bind":            "127.0.0.1",
				"captureMode":     "NONE",
				"defaultEndpoint": m.Upstream.Addr,
			}},
			// HTTP_PROXY: an egress port that selects every service (any
			// other protocol keeps only the services on that port, and the
			// sidecar would have no outbound cluster for envoy-rls).
			"egress": []any{map[string]any{
				"port":        map[string]any{"number": outPort, "name": "http-proxy", "protocol": "HTTP_PROXY"},
				"bind":        "127.0.0.1",
				"captureMode": "NONE",
				"hosts":       []string{"*/*"},
			}},
		}))
	}
	names := make([]string, 0, len(files))
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(m.ConfigDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("%s: istiod config directory: %s", set.Name, strings.Join(names, " "))
	if m.Istiod, err = startIstiod(t, m.ConfigDir); err != nil {
		var filters []string
		for _, f := range set.envoyFilters() {
			filters = append(filters, f.Metadata.Namespace+"/"+f.Metadata.Name)
		}
		return nil, fmt.Errorf("%s: EnvoyFilters %v: %w", set.Name, filters, err)
	}
	for _, g := range set.Gateways {
		m.Gateways = append(m.Gateways, startProxy(t, m.Istiod, g))
	}
	if set.Sidecar != nil {
		m.Sidecar = startProxy(t, m.Istiod, *set.Sidecar)
	}
	return m, nil
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func resource(apiVersion, kind, namespace, name string, spec any) map[string]any {
	return map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}
}

// serviceEntry replaces an envoy-rls Service (one with a "grpc" port) by a
// ServiceEntry of the same host and ports whose endpoint is the envoy-rls
// process: istiod generates the same outbound|PORT||HOST cluster for it.
// Other Services (the demo Redis) have nothing to stand in for: nil.
func serviceEntry(svc object, rls *rlsproc.Proc) (map[string]any, error) {
	var spec struct {
		Ports []struct {
			Name        string `json:"name"`
			Port        int    `json:"port"`
			AppProtocol string `json:"appProtocol"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(svc.Spec, &spec); err != nil {
		return nil, fmt.Errorf("%v: %w", svc, err)
	}
	targets := map[string]string{"grpc": rls.GRPCAddr, "http-admin": rls.HTTPAddr}
	var ports []any
	eps := map[string]any{}
	isRLS := false
	for _, p := range spec.Ports {
		addr, ok := targets[p.Name]
		if !ok {
			continue
		}
		isRLS = isRLS || p.Name == "grpc"
		_, port, _ := strings.Cut(addr, ":")
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("envoy-rls address %q: %w", addr, err)
		}
		ports = append(ports, map[string]any{"number": p.Port, "name": p.Name, "protocol": strings.ToUpper(p.AppProtocol)})
		eps[p.Name] = n
	}
	if !isRLS {
		return nil, nil
	}
	return resource("networking.istio.io/v1", "ServiceEntry", svc.Metadata.Namespace, svc.Metadata.Name, map[string]any{
		"hosts":      []string{svc.Metadata.Name + "." + svc.Metadata.Namespace + ".svc.cluster.local"},
		"location":   "MESH_INTERNAL",
		"resolution": "STATIC",
		"ports":      ports,
		"endpoints":  []any{map[string]any{"address": "127.0.0.1", "ports": eps}},
	}), nil
}

// rulesDir writes envoy-rls's rules: the files of the set's rules
// ConfigMaps (envoy-rls-config, or the chart's <release>-rules), and for
// each domain they do not define, the file of examples/config that does
// (the chart's values say their rate_limits make the descriptors of
// examples/config; its existingConfigMap and xds values sets render no
// rules at all).
func rulesDir(t *testing.T, set manifestSet) (string, error) {
	dir := t.TempDir()
	domains := map[string]bool{}
	for _, o := range set.Objects {
		if o.Kind != "ConfigMap" || (o.Metadata.Name != "envoy-rls-config" && !strings.HasSuffix(o.Metadata.Name, "-rules")) {
			continue
		}
		for name, data := range o.Data {
			p := filepath.Join(dir, name)
			if old, err := os.ReadFile(p); err == nil && string(old) != data {
				return "", fmt.Errorf("%s: two rules ConfigMaps hold different %s", set.Name, name)
			}
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				return "", err
			}
			domains[domainOf(data)] = true
		}
	}
	examples, err := filepath.Glob(childproc.RepoPath("examples/config/*.yaml"))
	if err != nil || len(examples) == 0 {
		return "", fmt.Errorf("no rules in examples/config (%v)", err)
	}
	for _, e := range examples {
		data, err := os.ReadFile(e)
		if err != nil {
			return "", err
		}
		d := domainOf(string(data))
		if d == "" {
			return "", fmt.Errorf("%s names no domain", e)
		}
		if domains[d] {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "example-"+filepath.Base(e)), data, 0o600); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// domainOf returns the domain a rules file names.
func domainOf(rules string) string {
	for _, l := range strings.Split(rules, "\n") {
		if v, ok := strings.CutPrefix(l, "domain:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// waitSynced waits until istiod has pushed to the proxy and the proxy
// acknowledged every type, and until cond holds on its config dump; it
// returns why not when the bound passes.
func (m *mesh) waitSynced(p *proxy, cond func(dumpFacts) error) (dumpFacts, error) {
	deadline := time.Now().Add(pushTimeout)
	for {
		ok, why := m.Istiod.synced(p.Spec.ID())
		var f dumpFacts
		var condErr error
		if ok {
			dump, err := p.configDump()
			if err != nil {
				return f, err
			}
			f = facts(dump)
			if condErr = cond(f); condErr == nil {
				return f, nil
			}
		}
		// A rejection (NACK) is the proxy's final word on this push.
		if time.Now().After(deadline) || strings.Contains(why, "rejected by the proxy") {
			if !ok {
				if ack := m.Istiod.ackErrors(); len(ack) > 0 {
					why += "\nistiod's log: " + strings.Join(ack, "\n")
				}
				return f, errors.New("istiod did not get the config acknowledged: " + why)
			}
			return f, condErr
		}
		time.Sleep(100 * time.Millisecond)
	}
}
