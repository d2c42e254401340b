package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
)

const xdsNode = "rls-e2e"

// xdsLimit is the xDS rules of these tests: domain api, path=/a limited
// to rpu requests a minute (0 denies all).
func xdsLimit(rpu uint32) *rlsconf.RateLimitConfig {
	return xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_MINUTE, rpu))
}

// xdsArgs are the flags that point envoy-rls at cp, with a short backoff
// so a reconnect is quick (nothing asserts on its timing).
func xdsArgs(cp *xdstest.Server, extra ...string) []string {
	return append([]string{"--config-source=xds", "--xds-server", cp.Addr, "--xds-node-id", xdsNode,
		"--xds-backoff-initial=50ms", "--xds-backoff-max=500ms"}, extra...)
}

// code is the overall code of one request for path=/a.
func (s *server) code() pb.RateLimitResponse_Code {
	s.t.Helper()
	return s.ask("api", desc("path", "/a")).GetOverallCode()
}

// awaitCode polls until a request for path=/a gets want. The bound is a
// liveness bound, generous for a loaded machine: the issue asks for an
// update to decide within a second, which the log line reports.
func (s *server) awaitCode(t *testing.T, why string, want pb.RateLimitResponse_Code) {
	t.Helper()
	start := time.Now()
	eventually.True(t, why, func() (bool, string) {
		got := s.code()
		return got == want, got.String()
	})
	t.Logf("%s: deciding %v after %v", why, want, time.Since(start))
}

// acked waits until cp saw version v ACKed.
func acked(t *testing.T, cp *xdstest.Server, v string) {
	t.Helper()
	eventually.Holds(t, "version "+v+" ACKed", func() bool {
		_, ok := cp.Find(func(r xdstest.Request) bool { return r.IsACK(v) })
		return ok
	})
}

// debugSource is the source /debug/config shows for domain.
func (s *server) debugSource(t *testing.T, domain string) (src struct{ Type, Name, Version string }) {
	t.Helper()
	code, body := s.getDebug("/debug/config")
	if code != http.StatusOK {
		t.Fatalf("/debug/config: %d %s", code, body)
	}
	var cfg struct {
		Domains []struct {
			Domain string
			Source struct{ Type, Name, Version string }
			Rules  []struct{ Limits []struct{ Algorithm string } }
		}
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("/debug/config: %v: %s", err, body)
	}
	for _, d := range cfg.Domains {
		if d.Domain == domain {
			return d.Source
		}
	}
	t.Fatalf("/debug/config has no domain %s: %s", domain, body)
	return src
}

func TestXDSInitialConfigServed(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(2))
	ext := filepath.Join(t.TempDir(), "ext.yaml")
	writeFile(t, ext, "domains: {api: {defaults: {algorithm: fixed_window}}}\n")
	s := startServer(t, serveOpts{Args: xdsArgs(cp, "--xds-extensions-file", ext)})

	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := s.code(); got != want {
			t.Errorf("request %d: %v, want %v", i+1, got, want)
		}
	}
	if src := s.debugSource(t, "api"); src.Type != "xds" || src.Name != "api-rules" || src.Version != "v1" {
		t.Errorf("/debug/config source %+v, want xds api-rules v1", src)
	}
	if _, body := s.getDebug("/debug/config"); !strings.Contains(body, `"algorithm": "fixed_window"`) {
		t.Errorf("/debug/config does not show the extensions file's algorithm: %s", body)
	}
	acked(t, cp, "v1")
	m := s.scrape()
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"envoy_rls_xds_connected", nil, 1},
		{"envoy_rls_xds_config_info", map[string]string{"version": "v1"}, 1},
		{"envoy_rls_xds_acks_total", nil, 1},
		{"envoy_rls_xds_nacks_total", nil, 0},
	} {
		if got := m.get(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if m.get("envoy_rls_xds_last_update_timestamp_seconds", nil) <= 0 {
		t.Error("envoy_rls_xds_last_update_timestamp_seconds not set")
	}
}

func TestXDSUpdateChangesDecisions(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(0))
	s := startServer(t, serveOpts{Args: xdsArgs(cp)})
	if got := s.code(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("v1 (limit 0): %v, want OVER_LIMIT", got)
	}
	cp.Set(xdsNode, "v2", xdsLimit(1000))
	s.awaitCode(t, "v2 (limit 1000)", pb.RateLimitResponse_OK)
	if src := s.debugSource(t, "api"); src.Version != "v2" {
		t.Errorf("/debug/config version %q, want v2", src.Version)
	}
	// explain names the domain's source at the version deciding.
	if rep := explainJSON(t, "--addr", s.DebugAddr, "--domain", "api", "-d", "path=/a"); rep.Source != "xds:api-rules@v2" {
		t.Errorf("explain source %q, want xds:api-rules@v2", rep.Source)
	}
}

func TestXDSInvalidPushIsNACKed(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(0))
	s := startServer(t, serveOpts{Args: xdsArgs(cp)})
	acked(t, cp, "v1")

	bad := xdsLimit(1000)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	cp.Set(xdsNode, "v2", bad)
	var nack xdstest.Request
	eventually.Holds(t, "v2 NACKed", func() bool {
		var ok bool
		nack, ok = cp.Find(func(r xdstest.Request) bool { return r.IsNACK() })
		return ok
	})
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "xds:api-rules") || !strings.Contains(msg, "descriptors[0].rate_limit.unit") {
		t.Errorf("NACK reason %q, want the resource and the field", msg)
	}
	if nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK version %q, want the version in force v1", nack.GetVersionInfo())
	}
	// The old rules keep deciding, and the replica stays ready.
	if got := s.code(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the NACK: %v, want v1's OVER_LIMIT", got)
	}
	s.readinessAgrees(t, "after a NACK", true)
	m := s.scrape()
	if m.get("envoy_rls_xds_nacks_total", nil) < 1 || m.get("envoy_rls_xds_config_info", map[string]string{"version": "v1"}) != 1 {
		t.Errorf("metrics after the NACK: nacks %v, v1 info %v", m.get("envoy_rls_xds_nacks_total", nil), m.get("envoy_rls_xds_config_info", map[string]string{"version": "v1"}))
	}
	if m.get("envoy_rls_config_last_reload_successful", nil) != 0 {
		t.Error("envoy_rls_config_last_reload_successful is not 0 after a NACK")
	}
	if !strings.Contains(s.logs.String(), "xds push refused (NACK)") {
		t.Error("no log line for the NACK")
	}
}

func TestXDSManagementServerRestart(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(0))
	s := startServer(t, serveOpts{Args: xdsArgs(cp)})
	acked(t, cp, "v1")
	before := len(cp.Requests())

	cp.Restart()
	eventually.Holds(t, "a new stream to the restarted server", func() bool {
		return len(cp.Requests()) > before && s.scrape().get("envoy_rls_xds_connected", nil) == 1
	})
	if got := cp.Requests()[before]; got.GetVersionInfo() != "v1" || got.GetResponseNonce() != "" {
		t.Errorf("resubscription with version %q nonce %q, want v1 and none", got.GetVersionInfo(), got.GetResponseNonce())
	}
	if s.scrape().get("envoy_rls_xds_reconnects_total", nil) < 1 {
		t.Error("envoy_rls_xds_reconnects_total not counted")
	}
	// While the restarted server has no snapshot, the rules stay.
	if got := s.code(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("while reconnected without a snapshot: %v, want v1's OVER_LIMIT", got)
	}
	cp.Set(xdsNode, "v2", xdsLimit(1000))
	s.awaitCode(t, "resync to v2", pb.RateLimitResponse_OK)
	acked(t, cp, "v2")
}

func TestXDSReadiness(t *testing.T) {
	cp := xdstest.Start(t, nil) // no snapshot yet
	s := startServer(t, serveOpts{Args: xdsArgs(cp), NoReadyWait: true})
	s.awaitReadyz(t, "before the first config", http.StatusServiceUnavailable, "no rate limit config")
	s.readinessAgrees(t, "before the first config", false)

	cp.Set(xdsNode, "v1", xdsLimit(0))
	s.awaitReadyz(t, "after the first config", http.StatusOK, "")
	s.readinessAgrees(t, "after the first config", true)

	forced := startServer(t, serveOpts{Args: xdsArgs(xdstest.Start(t, nil), "--xds-force-start")})
	forced.readinessAgrees(t, "forced start without config", true)
	if got := forced.code(); got != pb.RateLimitResponse_OK {
		t.Errorf("forced start, no rules: %v, want OK (no limit)", got)
	}
}

// TestXDSTLS: mTLS to the management server, its name checked through the
// SAN override (the server is dialled by IP, its certificate verified as
// localhost).
func TestXDSTLS(t *testing.T) {
	ca, err := testcert.NewCA("xds-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pemFile := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, string(data))
		return p
	}
	pair, err := ca.IssueTLS("localhost", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	cliCert, cliKey, err := ca.Issue("envoy-rls", 3, false)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cp := xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	cp.Set(xdsNode, "v1", xdsLimit(0))

	s := startServer(t, serveOpts{Args: xdsArgs(cp, "--xds-tls-ca", pemFile("ca.pem", ca.PEM),
		"--xds-tls-cert", pemFile("c.pem", cliCert), "--xds-tls-key", pemFile("k.pem", cliKey), "--xds-tls-san", "localhost")})
	if got := s.code(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("over TLS: %v, want v1's OVER_LIMIT", got)
	}

	// Without a client certificate the server refuses the stream: no
	// config, not ready.
	noCert := startServer(t, serveOpts{Args: xdsArgs(cp, "--xds-tls-ca", filepath.Join(dir, "ca.pem"), "--xds-tls-san", "localhost"), NoReadyWait: true})
	noCert.awaitReadyz(t, "without a client certificate", http.StatusServiceUnavailable, "no rate limit config")
}

// TestXDSReferenceEnv: /bin/ratelimit with no arguments and only the
// reference's variables loads its rules from the management server.
func TestXDSReferenceEnv(t *testing.T) {
	cp := xdstest.Start(t, nil)
	cp.Set("ref-node", "r1", xdsLimit(0))
	s := startAsRatelimit(t, []string{
		"LOG_FORMAT=json", "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + cp.Addr, "CONFIG_GRPC_XDS_NODE_ID=ref-node",
		"CONFIG_GRPC_XDS_NODE_METADATA=zone:z1", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=x-token:t1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=50ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=1s",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR=0.2", "XDS_CLIENT_BACKOFF_JITTER=true", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=1048576",
	})
	if got := s.code(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("rules from xDS: %v, want OVER_LIMIT", got)
	}
	first := cp.Requests()[0]
	if z := first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); z != "z1" {
		t.Errorf("node metadata zone %q, want z1", z)
	}
	if tok := first.Metadata.Get("x-token"); fmt.Sprint(tok) != "[t1]" {
		t.Errorf("x-token header %v, want [t1]", tok)
	}
	for _, v := range []string{"CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "XDS_CLIENT_BACKOFF_JITTER"} {
		if !hasLog(t, s.logs.String(), "info", "envoyproxy/ratelimit setting mapped", v) {
			t.Errorf("no mapping log line for %s", v)
		}
	}
}

// TestXDSQuickstart runs docs/xds.md's quickstart: the example control
// plane of examples/xds-control-plane, built as go run builds it, serves
// its rules file; envoy-rls pointed at it decides by those rules, and by
// the new ones once the file changes and the control plane pushes them.
func TestXDSQuickstart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "xds-control-plane")
	if out, err := exec.Command("go", "build", "-o", bin, childproc.RepoPath("examples/xds-control-plane")).CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/xds-control-plane: %v\n%s", err, out)
	}
	shipped, err := os.ReadFile(childproc.RepoPath("examples/xds-control-plane/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, shipped, 0o600); err != nil {
		t.Fatal(err)
	}

	cp := exec.Command(bin, "-addr", "127.0.0.1:0", "-rules", rules, "-poll", "50ms")
	cp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cp.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Process.Kill(); _ = cp.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "xds management server on "); ok {
				addr <- a
			}
		}
	}()
	var cpAddr string
	select {
	case cpAddr = <-addr:
	case <-time.After(startTimeout):
		t.Fatalf("the example control plane did not log its address within %v", startTimeout)
	}

	s := startServer(t, serveOpts{Args: []string{"--config-source=xds", "--xds-server", cpAddr}})
	// The shipped rules: 3 logins a minute.
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := s.ask("api", desc("path", "/login")).GetOverallCode(); got != want {
			t.Errorf("login %d: %v, want %v", i+1, got, want)
		}
	}
	// Push a rule for a path the first version did not limit: 0 requests.
	edited := strings.Replace(string(shipped), "value: /login", "value: /signup", 1)
	edited = strings.Replace(edited, "requests_per_unit: 3", "requests_per_unit: 0", 1)
	if edited == string(shipped) {
		t.Fatal("examples/xds-control-plane/rules.yaml no longer has the rule this test edits")
	}
	if err := os.WriteFile(rules, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the pushed rule decides /signup", func() (bool, string) {
		code := s.ask("api", desc("path", "/signup")).GetOverallCode()
		return code == pb.RateLimitResponse_OVER_LIMIT, fmt.Sprintf("/signup: %v", code)
	})
	if got := s.ask("api", desc("path", "/login")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("/login after the push: %v, want OK (version 2 has no rule for it)", got)
	}
}
