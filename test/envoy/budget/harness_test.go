package budget

import (
	"context"
	"encoding/json"
	"fmt"
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

	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// binPath is the envoy-rls binary TestMain built.
var binPath string

func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath, envoytest.Installed)
}

// Request and response headers of the fake LLM upstream.
const (
	// usageHeader asks the upstream for a response of that many tokens
	// (the client plays the model: it decides what the answer costs).
	usageHeader = "x-test-usage"
	// delayHeader holds the upstream's answer that many milliseconds, so
	// that requests are really in flight together.
	delayHeader = "x-test-delay-ms"
	// tokensHeader is the usage figure the upstream reports in a header
	// (Envoy Gateway's shape reads it); the JSON body's usage.total_tokens
	// carries the same figure (the AI Gateway's shape reads that).
	tokensHeader = "x-usage-total-tokens"
	// maxTokensHeader is the client's estimate (an OpenAI max_tokens
	// figure) that the reservation pattern reserves.
	maxTokensHeader = "x-max-tokens"
)

// served is one response the upstream gave.
type served struct {
	At     time.Time
	Tokens int64
}

// llm is a fake OpenAI-style upstream: it answers 200 with a chat
// completion whose usage.total_tokens (and tokensHeader) is the figure the
// client asked for in usageHeader (42 by default), and records what it
// served, the ground truth of the tokens admitted.
type llm struct {
	Addr string

	mu  sync.Mutex
	log []served
}

func startLLM(t testing.TB) *llm {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &llm{Addr: l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(u.serve)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

func (u *llm) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := int64(42)
	if v, err := strconv.ParseInt(r.Header.Get(usageHeader), 10, 64); err == nil && v >= 0 {
		n = v
	}
	if ms, err := strconv.Atoi(r.Header.Get(delayHeader)); err == nil && ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	u.mu.Lock()
	u.log = append(u.log, served{At: time.Now(), Tokens: n})
	u.mu.Unlock()
	prompt := n / 4
	body, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": "gpt-4o-mini",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": n - prompt, "total_tokens": n},
	})
	w.Header().Set("content-type", "application/json")
	w.Header().Set(tokensHeader, strconv.FormatInt(n, 10))
	_, _ = w.Write(body)
}

// totals returns how many responses the upstream served and their tokens.
func (u *llm) totals() (responses int, tokens int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.log {
		tokens += s.Tokens
	}
	return len(u.log), tokens
}

// store names the backend envoy-rls runs on.
type store string

const (
	onRedis  store = "redis"
	onMemory store = "memory"
)

// startRLS starts one envoy-rls replica on rules (name → YAML), on Redis
// at redisAddr or in-process when redisAddr is "".
func startRLS(t *testing.T, rules map[string]string, redisAddr string, extra ...string) *rlsproc.Proc {
	t.Helper()
	dir := t.TempDir()
	for name, data := range rules {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"serve", "--config-dir", dir,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
		"--redis-timeout=2s"}
	if redisAddr != "" {
		args = append(args, "--redis-url", "redis://"+redisAddr)
	}
	return rlsproc.Start(t, binPath, append(args, extra...), nil)
}

// startEnvoy runs bootstrap with its envoy_rls cluster at the replicas
// rlsAddrs (Envoy balances over them), its llm cluster at the upstream,
// and its ingress listener and the others named in listeners on free
// ports, and returns it with ingress's URL.
func startEnvoy(t *testing.T, name string, bootstrap []byte, rlsAddrs []string, llmAddr string, listeners ...string) (*envoytest.Envoy, string) {
	t.Helper()
	addrs := envoytest.Addresses{
		Clusters:  map[string]string{"envoy_rls": rlsAddrs[0], "llm": llmAddr},
		Listeners: map[string]string{"ingress": "127.0.0.1:0"},
		Admin:     "127.0.0.1:0",
	}
	for _, l := range listeners {
		addrs.Listeners[l] = "127.0.0.1:0"
	}
	local, err := envoytest.Rewrite(bootstrap, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rlsAddrs) > 1 {
		local = withEndpoints(t, local, "envoy_rls", rlsAddrs)
	}
	e := envoytest.Start(t, local, envoytest.Options{Name: name})
	la, err := e.ListenerAddr("ingress")
	if err != nil {
		t.Fatal(err)
	}
	return e, "http://" + la
}

// withEndpoints gives the bootstrap's static cluster one endpoint per
// address (envoytest.Rewrite gives it one).
func withEndpoints(t *testing.T, bootstrap []byte, cluster string, addrs []string) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(bootstrap, &doc); err != nil {
		t.Fatal(err)
	}
	var eps []any
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		eps = append(eps, map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": host, "port_value": p}}}})
	}
	found := false
	static, _ := doc["static_resources"].(map[string]any)
	clusters, _ := static["clusters"].([]any)
	for _, c := range clusters {
		if c, ok := c.(map[string]any); ok && c["name"] == cluster {
			c["load_assignment"] = map[string]any{"cluster_name": cluster, "endpoints": []any{map[string]any{"lb_endpoints": eps}}}
			found = true
		}
	}
	if !found {
		t.Fatalf("the bootstrap has no cluster %q", cluster)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// redisFor returns a fresh Redis for st, or nil in-process.
func redisFor(t *testing.T, st store) *redistest.Server {
	t.Helper()
	if st == onRedis {
		return redistest.Standalone(t)
	}
	return nil
}

func addrOf(r *redistest.Server) string {
	if r == nil {
		return ""
	}
	return r.Addr
}

// httpClient is shared by the clients: keep-alive connections to Envoy.
var httpClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// call is one client request through Envoy and what came back.
type call struct {
	Sent, Done time.Time
	Status     int
	// Tokens is the usage the response reported (0 without one).
	Tokens int64
	Err    error
}

// ask sends one chat completion through Envoy at url: usage tokens for
// the upstream to report, estimate the x-max-tokens figure (0: none),
// held delayMS by the upstream.
func ask(url string, header map[string]string, usage, estimate int64, delayMS int) call {
	c := call{Sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url,
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		c.Err = err
		return c
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set(usageHeader, strconv.FormatInt(usage, 10))
	if estimate > 0 {
		req.Header.Set(maxTokensHeader, strconv.FormatInt(estimate, 10))
	}
	if delayMS > 0 {
		req.Header.Set(delayHeader, strconv.Itoa(delayMS))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.Err = err
		return c
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.Done, c.Status = time.Now(), resp.StatusCode
	if resp.StatusCode == http.StatusOK {
		var r struct {
			Usage struct {
				Total int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			c.Err = fmt.Errorf("200 with a body that is no completion: %q", body)
		}
		c.Tokens = r.Usage.Total
	}
	return c
}

// metric sums the Prometheus samples of name (all label sets) that
// envoy-rls serves on its HTTP listener.
func metric(t testing.TB, httpAddr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// testClusters ends every test bootstrap here: the model (llm) and
// envoy-rls, on placeholder ports that envoytest.Rewrite moves.
const testClusters = `  clusters:
  - name: llm
    type: STATIC
    connect_timeout: 1s
    load_assignment: {cluster_name: llm, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]}
  - name: envoy_rls
    type: STATIC
    connect_timeout: 1s
    load_assignment: {cluster_name: envoy_rls, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 2}}}}]}]}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
`
