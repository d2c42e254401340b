// Package e2e runs envoy-rls behind a real Envoy (1.40, internal/testkit/envoytest):
// every test starts, on free loopback ports, Redis (or none, for the
// in-process store), the built envoy-rls binary, a real HTTP upstream, and
// Envoy running the shipped envoy-config/envoy.yaml with only its addresses
// moved to loopback (envoytest.Rewrite). Clients talk HTTP to Envoy's
// listener; what they see is what a user behind Envoy sees.
package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// binPath is the envoy-rls binary TestMain built.
var binPath string

func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath, envoytest.Installed)
}

// repoPath is a path inside the repository.
func repoPath(rel string) string { return childproc.RepoPath(rel) }

// Loopback stand-ins for the documentation addresses of the shipped rules
// (RFC 5737), so a client bound to them reaches the address rules while
// every packet stays on loopback.
var loopbackAddrs = map[string]string{
	"192.0.2.66":    "127.0.0.66", // blocked_ip
	"198.51.100.10": "127.0.0.10", // the unlimited uptime monitor
}

// exampleRules returns examples/config's rule files, with the address
// rules' values moved to their loopback stand-ins. It fails when a
// stand-in's address is no longer in the shipped rules, so the copy cannot
// silently drift from them.
func exampleRules(t testing.TB) map[string]string {
	t.Helper()
	dir := repoPath("examples/config")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	found := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for from, to := range loopbackAddrs {
			if strings.Contains(s, from) {
				found[from] = true
				s = strings.ReplaceAll(s, from, to)
			}
		}
		files[e.Name()] = s
	}
	for from := range loopbackAddrs {
		if !found[from] {
			t.Fatalf("examples/config no longer names %s; update loopbackAddrs", from)
		}
	}
	return files
}

// writeRules writes files (name → YAML) into dir, each atomically (a hidden
// temporary file renamed over it), so the watcher never reads half a file.
func writeRules(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		tmp := filepath.Join(dir, ".tmp-"+name)
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// upstream is the real HTTP server behind Envoy (envoytest.Upstream).
type upstream = envoytest.Upstream

func startUpstream(t testing.TB) *upstream { return envoytest.StartUpstream(t) }

// store names the backend a stack's envoy-rls runs on.
type store string

const (
	onRedis  store = "redis"
	onMemory store = "memory"
)

// stores are the backends every scenario runs on.
var stores = []store{onRedis, onMemory}

// stackOpts configure startStack.
type stackOpts struct {
	Store store
	// Rules are the rule files (name → YAML); nil means exampleRules.
	Rules map[string]string
	// ServeArgs are extra `envoy-rls serve` flags; Env extra variables.
	ServeArgs []string
	Env       []string
	// Bootstrap is the Envoy bootstrap before the address rewrite; nil
	// means envoy-config/envoy.yaml with its filter timeout raised to
	// patientTimeout, or as shipped with ShippedTimeout.
	Bootstrap []byte
	// ShippedTimeout keeps envoy.yaml's own filter timeout (0.25s), for
	// the tests about what that timeout does.
	ShippedTimeout bool
	// Addresses adds to (or overrides) the stack's own rewrite, e.g. to
	// point the filter's cluster at a unix socket.
	Addresses envoytest.Addresses
	// FixedGRPCPort gives envoy-rls a fixed gRPC port, so a Restart serves
	// where Envoy's cluster points.
	FixedGRPCPort bool
	// RLSCluster names the bootstrap's cluster that envoy-rls is; ""
	// means envoy_rls, envoy.yaml's.
	RLSCluster string
}

// stack is one Envoy → envoy-rls → Redis chain with an upstream.
type stack struct {
	Envoy    *envoytest.Envoy
	RLS      *rlsproc.Proc
	Redis    *redistest.Server // nil on the in-process store
	Upstream *upstream
	// URL is Envoy's listener, http://127.0.0.1:port.
	URL string
	// RulesDir is envoy-rls's --config-dir; write into it to reload.
	RulesDir string
}

// startStack starts the chain for one test and stops it at cleanup.
func startStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	s := &stack{Upstream: startUpstream(t), RulesDir: t.TempDir()}
	rules := o.Rules
	if rules == nil {
		rules = exampleRules(t)
	}
	writeRules(t, s.RulesDir, rules)

	grpcAddr := "127.0.0.1:0"
	if o.FixedGRPCPort {
		port, err := childproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		grpcAddr = "127.0.0.1:" + strconv.Itoa(port)
	}
	args := []string{"serve", "--config-dir", s.RulesDir,
		"--grpc-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
		// Envoy's filter timeout (0.25s in envoy.yaml) bounds a request,
		// not this; a generous Redis timeout keeps a slow machine from
		// turning into errors. Tests about timeouts set their own.
		"--redis-timeout=2s"}
	switch o.Store {
	case onRedis:
		s.Redis = redistest.Standalone(t)
		args = append(args, "--redis-url", "redis://"+s.Redis.Addr)
	case onMemory, "":
	default:
		t.Fatalf("unknown store %q", o.Store)
	}
	args = append(args, o.ServeArgs...)
	s.RLS = rlsproc.Start(t, binPath, args, o.Env)
	s.Envoy, s.URL = startEnvoy(t, o, s.RLS.GRPCAddr, s.Upstream.Addr)
	return s
}

// startEnvoy runs Envoy on o.Bootstrap (envoy.yaml when nil) with its
// envoy_rls cluster at rlsAddr, echo at upstreamAddr and o.Addresses, and
// returns it and its listener's URL.
func startEnvoy(t *testing.T, o stackOpts, rlsAddr, upstreamAddr string) (*envoytest.Envoy, string) {
	t.Helper()
	rlsCluster := o.RLSCluster
	if rlsCluster == "" {
		rlsCluster = "envoy_rls"
	}
	addrs := envoytest.Addresses{
		Clusters:  map[string]string{rlsCluster: rlsAddr, "echo": upstreamAddr},
		Listeners: map[string]string{"ingress": "127.0.0.1:0"},
		Admin:     "127.0.0.1:0",
	}
	for k, v := range o.Addresses.Clusters {
		addrs.Clusters[k] = v
	}
	for k, v := range o.Addresses.Listeners {
		addrs.Listeners[k] = v
	}
	boot := o.Bootstrap
	switch {
	case boot == nil && o.ShippedTimeout:
		boot = childproc.ReadRepoFile(t, "envoy-config/envoy.yaml")
	case boot == nil:
		boot = withFilter(t, patient)
	}
	local, err := envoytest.Rewrite(boot, addrs)
	if err != nil {
		t.Fatal(err)
	}
	e := envoytest.Start(t, local, envoytest.Options{Name: t.Name()})
	la, err := e.ListenerAddr("ingress")
	if err != nil {
		t.Fatal(err)
	}
	return e, "http://" + la
}

// answer is what a client behind Envoy saw.
type answer struct {
	Status int
	Header http.Header
	Body   string
	Err    error
}

// request describes one client request through Envoy.
type request struct {
	Method string // "" means GET
	Path   string
	Header map[string]string
	// From is the loopback address the client binds to ("" for the
	// kernel's choice, 127.0.0.1): Envoy's remote_address action sees it.
	From string
}

// clients caches one HTTP client per source address.
var clients sync.Map // string → *http.Client

func clientFrom(from string) *http.Client {
	if c, ok := clients.Load(from); ok {
		return c.(*http.Client)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64},
	}
	actual, _ := clients.LoadOrStore(from, c)
	return actual.(*http.Client)
}

// do sends r through Envoy. A transport error is returned in answer.Err,
// never fatal, so load loops can count them.
func (s *stack) do(r request) answer {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+r.Path, nil)
	if err != nil {
		return answer{Err: err}
	}
	for k, v := range r.Header {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := clientFrom(r.From).Do(req)
	if err != nil {
		return answer{Err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// mustDo is do that fails t on a transport error.
func (s *stack) mustDo(t testing.TB, r request) answer {
	t.Helper()
	a := s.do(r)
	if a.Err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, a.Err)
	}
	return a
}
