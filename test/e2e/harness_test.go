// Package e2e runs the built envoy-rls binary as a process and drives it the
// way Envoy, Prometheus, an operator and Kubernetes do: over gRPC and HTTP,
// through its flags, environment, signals and files. TestMain builds
// cmd/envoy-rls once; every test starts its own server on free loopback
// ports (127.0.0.1:0 for gRPC, HTTP and debug; the real addresses are read
// from the "envoy-rls serving" log line), so tests run in parallel. Redis tests start their own
// redis-server through internal/testkit/redistest.
//
// Set E2E_ENVOY_RLS_BIN to a prebuilt binary to test it instead of building.
// Nothing here imports the service's packages: the binary is a black box.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// testVersion is stamped into the binary TestMain builds; "" when the binary
// came from E2E_ENVOY_RLS_BIN and its version is unknown.
var testVersion string

// binPath is the envoy-rls binary under test.
var binPath string

// Bounds for waits. They only cap how long a broken build can hang a test;
// nothing asserts on durations.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
	callTimeout  = 10 * time.Second
	pollTimeout  = 20 * time.Second
	pollInterval = 25 * time.Millisecond
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if p := os.Getenv("E2E_ENVOY_RLS_BIN"); p != "" {
		binPath = p
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "envoy-rls-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	testVersion = "e2e-test"
	binPath = filepath.Join(dir, "envoy-rls")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binPath,
		"github.com/envoy-rls/envoy-rls/cmd/envoy-rls")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/envoy-rls:", err)
		return 1
	}
	return m.Run()
}

// logLine is one decoded JSON log line; raw keeps every field.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	raw   map[string]any
}

// jsonLines decodes every non-empty line of out, failing t on a line that
// is not a JSON object: the default log format is JSON, one entry a line.
func jsonLines(t *testing.T, out string) []logLine {
	t.Helper()
	var lines []logLine
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", l, err)
		}
		if err := json.Unmarshal([]byte(l), &ll.raw); err != nil {
			t.Fatalf("log line is not a JSON object: %q: %v", l, err)
		}
		lines = append(lines, ll)
	}
	return lines
}

// server is one running `envoy-rls serve` process.
type server struct {
	t         *testing.T
	proc      *childproc.Proc
	GRPCAddr  string
	HTTPAddr  string
	DebugAddr string
	logs      *childproc.Buffer

	connOnce sync.Once
	conn     *grpc.ClientConn
}

// serveOpts configure startServer.
type serveOpts struct {
	// ConfigDir is passed as --config-dir unless empty.
	ConfigDir string
	// Args are extra serve flags.
	Args []string
	// Env are extra KEY=value environment entries.
	Env []string
	// NoReadyWait returns as soon as the addresses are logged, before
	// /readyz answers 200.
	NoReadyWait bool
}

// startServer runs `envoy-rls serve` on loopback ports, waits for it to
// log its addresses and report ready, and stops it at cleanup (killing its
// process group if it did not exit). Its logs are printed when t failed.
func startServer(t *testing.T, o serveOpts) *server {
	t.Helper()
	// A generous Redis timeout by default, so a slow CI machine cannot turn
	// into failed requests; tests about timeouts set their own (the last
	// flag wins).
	args := []string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0", "--redis-timeout=5s"}
	if o.ConfigDir != "" {
		args = append(args, "--config-dir", o.ConfigDir)
	}
	args = append(args, o.Args...)
	return startProcess(t, binPath, args, o.Env, !o.NoReadyWait)
}

// startProcess runs bin with args and the extra env entries, waits for it
// to log its addresses (and, with ready, for /readyz to answer 200), and
// stops it at cleanup, killing its process group if it did not exit. Its
// logs are printed when t failed.
func startProcess(t *testing.T, bin string, args, env []string, ready bool) *server {
	t.Helper()
	s := &server{t: t, logs: &childproc.Buffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv(env)
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	// Its own process group, so cleanup can kill everything it started.
	proc, err := childproc.Start(cmd)
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s.proc = proc
	t.Cleanup(s.cleanup)

	deadline := time.Now().Add(startTimeout)
	for s.GRPCAddr == "" {
		select {
		case <-s.proc.Done():
			t.Fatalf("%s exited with code %d before serving; logs:\n%s", bin, s.proc.ExitCode(), s.logs)
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log its addresses within %v; logs:\n%s", bin, startTimeout, s.logs)
		}
		l := rlsproc.ServingLine(s.logs.String(), 0)
		s.GRPCAddr, s.HTTPAddr, s.DebugAddr = l.GRPC, l.HTTP, l.Debug
	}
	if ready {
		s.awaitReadyz(t, "/readyz answers 200", http.StatusOK, "")
	}
	return s
}

// childEnv is the test's environment without any ENVOY_RLS_* variable (a
// developer's shell must not change the tests), plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVOY_RLS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func (s *server) cleanup() {
	if s.conn != nil {
		s.conn.Close()
	}
	if !s.proc.Exited() {
		s.proc.Kill()
	}
	if s.t.Failed() {
		s.t.Logf("envoy-rls logs:\n%s", s.logs)
	}
}

// signal sends sig to the server process.
func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.proc.Cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (s *server) wait() int {
	s.t.Helper()
	select {
	case <-s.proc.Done():
		return s.proc.ExitCode()
	case <-time.After(stopTimeout):
		s.t.Fatalf("envoy-rls did not exit within %v; logs:\n%s", stopTimeout, s.logs)
		return -1
	}
}

// stop sends SIGTERM and requires a clean exit (code 0).
func (s *server) stop() {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	if code := s.wait(); code != 0 {
		s.t.Fatalf("envoy-rls exited with code %d after SIGTERM, want 0; logs:\n%s", code, s.logs)
	}
}

// grpcConn returns a plaintext client connection, closed at cleanup.
func (s *server) grpcConn() *grpc.ClientConn {
	s.t.Helper()
	s.connOnce.Do(func() {
		c, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			s.t.Fatalf("grpc client for %s: %v", s.GRPCAddr, err)
		}
		s.conn = c
	})
	return s.conn
}

// rls returns a RateLimitService client.
func (s *server) rls() pb.RateLimitServiceClient {
	return pb.NewRateLimitServiceClient(s.grpcConn())
}

// ask sends one ShouldRateLimit request and fails t on any error.
func (s *server) ask(domain string, descs ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	s.t.Helper()
	return s.askReq(&pb.RateLimitRequest{Domain: domain, Descriptors: descs})
}

func (s *server) askReq(req *pb.RateLimitRequest) *pb.RateLimitResponse {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := s.rls().ShouldRateLimit(ctx, req)
	if err != nil {
		s.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// checkOnly marks d as a check that consumes nothing (hits_addend 0).
func checkOnly(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

var httpClient = &http.Client{Timeout: callTimeout}

// get fetches path from the HTTP address; transport errors give code 0.
func (s *server) get(path string) (int, string) { return getURL("http://" + s.HTTPAddr + path) }

// getDebug fetches path from the debug address.
func (s *server) getDebug(path string) (int, string) { return getURL("http://" + s.DebugAddr + path) }

func getURL(url string) (int, string) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends body to path on the HTTP address and fails t on transport errors.
func (s *server) post(path, body string) (int, string) {
	s.t.Helper()
	resp, err := httpClient.Post("http://"+s.HTTPAddr+path, "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitReadyz waits until /readyz answers code with a body containing want
// ("" for any body).
func (s *server) awaitReadyz(t *testing.T, why string, code int, want string) {
	t.Helper()
	eventually.True(t, fmt.Sprintf("%s: /readyz %d %q", why, code, want), func() (bool, string) {
		got, body := s.get("/readyz")
		return got == code && strings.Contains(body, want), fmt.Sprintf("status %d: %s", got, body)
	})
}

// awaitGoroutines waits until go_goroutines is back within slack of base
// (a leak keeps it above).
func (s *server) awaitGoroutines(t *testing.T, base, slack float64) {
	t.Helper()
	eventually.True(t, "goroutines return to their level before", func() (bool, string) {
		g := s.scrape().get("go_goroutines", nil)
		return g <= base+slack, fmt.Sprintf("go_goroutines %v, before %v", g, base)
	})
}

// rulesDir writes files (name → YAML) into a fresh directory.
func rulesDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	return dir
}

// writeFile replaces path atomically (a hidden temporary file renamed over
// it), so a watcher never reads half a file.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// runCLI runs the binary with args and returns its output and exit code.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = childEnv(env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("envoy-rls %v did not exit within %v; stderr:\n%s", args, startTimeout, errb.String())
	}
	return out.String(), errb.String(), childproc.ExitCode(err)
}

// metrics is one /metrics scrape: series ("name{l="v",…}", labels sorted) → value.
type metrics map[string]float64

// scrape fetches and parses /metrics.
func (s *server) scrape() metrics {
	s.t.Helper()
	code, body := s.get("/metrics")
	if code != http.StatusOK {
		s.t.Fatalf("GET /metrics: status %d: %s", code, body)
	}
	m, err := parseMetrics(body)
	if err != nil {
		s.t.Fatalf("parse /metrics: %v", err)
	}
	return m
}

// parseMetrics reads the Prometheus text format as promhttp writes it:
// comment lines, and `name{label="value",…} number` lines.
func parseMetrics(body string) (metrics, error) {
	m := metrics{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, rest, err := parseSeries(line)
		if err != nil {
			return nil, err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: value: %w", line, err)
		}
		m[seriesKey(name, labels)] = v
	}
	return m, nil
}

func parseSeries(line string) (name string, labels map[string]string, rest string, err error) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, "", fmt.Errorf("line %q: no value", line)
	}
	name, labels = line[:i], map[string]string{}
	if line[i] == ' ' {
		return name, labels, line[i+1:], nil
	}
	p := line[i+1:]
	for {
		p = strings.TrimLeft(p, ",")
		if strings.HasPrefix(p, "}") {
			return name, labels, p[1:], nil
		}
		eq := strings.Index(p, `="`)
		if eq < 0 {
			return "", nil, "", fmt.Errorf("line %q: bad labels", line)
		}
		key := p[:eq]
		p = p[eq+2:]
		var val strings.Builder
		for {
			if p == "" {
				return "", nil, "", fmt.Errorf("line %q: unterminated label value", line)
			}
			c := p[0]
			p = p[1:]
			if c == '"' {
				break
			}
			if c == '\\' && p != "" {
				switch p[0] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(p[0])
				}
				p = p[1:]
				continue
			}
			val.WriteByte(c)
		}
		labels[key] = val.String()
	}
}

// seriesKey is the canonical form of a series: labels sorted by name.
func seriesKey(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// get returns the value of one series, 0 when absent (a counter that has
// not moved yet has no series).
func (m metrics) get(name string, labels map[string]string) float64 {
	return m[seriesKey(name, labels)]
}

// names returns the sorted series keys.
func (m metrics) names() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
