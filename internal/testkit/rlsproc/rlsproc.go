// Package rlsproc builds the envoy-rls binary and runs it, for tests that
// put it behind something else (a real Envoy, a browser), as a black box on
// free loopback ports: it starts `envoy-rls serve`, reads the addresses from
// the "envoy-rls serving" log line, waits for /readyz, and kills, stops or
// restarts the process on demand. It imports none of the service's packages
// and must not be imported by non-test code.
package rlsproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// Bounds that only keep a broken build from hanging a test; nothing
// asserts on durations.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
)

// Build compiles cmd/envoy-rls into dir and returns the binary's path, or
// $E2E_ENVOY_RLS_BIN when that names a prebuilt one.
func Build(dir string) (string, error) {
	if p := os.Getenv("E2E_ENVOY_RLS_BIN"); p != "" {
		return p, nil
	}
	root := childproc.Root()
	bin := filepath.Join(dir, "envoy-rls")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version=e2e-test", "-o", bin, "./cmd/envoy-rls")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("rlsproc: go build ./cmd/envoy-rls: %w\n%s", err, out)
	}
	return bin, nil
}

// Proc is one envoy-rls process. Its addresses stay the same across
// Restart when they were given as fixed ports.
type Proc struct {
	GRPCAddr, HTTPAddr, DebugAddr string
	Logs                          *childproc.Buffer

	t    testing.TB
	bin  string
	args []string
	env  []string

	mu   sync.Mutex
	proc *childproc.Proc
}

// Start runs bin with args (usually "serve" and its flags; add
// --grpc-addr/--http-addr/--debug-addr, 127.0.0.1:0 is fine) and the extra
// environment (the test's own ENVOY_RLS_* variables are dropped, so a
// developer's shell cannot change a test), waits until it serves and is
// ready, and kills it at cleanup, printing its logs when t failed.
func Start(t testing.TB, bin string, args, env []string) *Proc {
	t.Helper()
	p := &Proc{t: t, bin: bin, args: args, env: env, Logs: &childproc.Buffer{}}
	p.launch()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("envoy-rls logs:\n%s", p.Logs)
		}
	})
	return p
}

func (p *Proc) launch() {
	p.t.Helper()
	cmd := exec.Command(p.bin, p.args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVOY_RLS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, p.env...)
	cmd.Stdout, cmd.Stderr = p.Logs, p.Logs
	// The serving line of this run: earlier runs' lines stay in Logs.
	skip := strings.Count(p.Logs.String(), "\n")
	proc, err := childproc.Start(cmd)
	if err != nil {
		p.t.Fatalf("rlsproc: start %s: %v", p.bin, err)
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	done := proc.Done()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			p.t.Fatalf("rlsproc: envoy-rls exited with code %d before serving; logs:\n%s", p.ExitCode(), p.Logs)
		case <-time.After(25 * time.Millisecond):
		}
		if l := ServingLine(p.Logs.String(), skip); l.GRPC != "" {
			p.GRPCAddr, p.HTTPAddr, p.DebugAddr = l.GRPC, l.HTTP, l.Debug
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("rlsproc: envoy-rls did not log its addresses within %v; logs:\n%s", startTimeout, p.Logs)
		}
	}
	for !p.ready() {
		select {
		case <-done:
			p.t.Fatalf("rlsproc: envoy-rls exited with code %d before ready; logs:\n%s", p.ExitCode(), p.Logs)
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("rlsproc: envoy-rls not ready within %v; logs:\n%s", startTimeout, p.Logs)
		}
	}
}

func (p *Proc) ready() bool {
	if strings.HasPrefix(p.HTTPAddr, "off") || p.HTTPAddr == "" {
		return true
	}
	resp, err := http.Get("http://" + p.HTTPAddr + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// Kill ends the process at once (SIGKILL to its group), as a crash does.
func (p *Proc) Kill() {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if !proc.Exited() {
		proc.Kill()
	}
}

// Stop sends SIGTERM and waits for the exit; it fails t when the process
// did not exit in time.
func (p *Proc) Stop() int {
	p.t.Helper()
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	_ = proc.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-proc.Done():
	case <-time.After(stopTimeout):
		p.t.Fatalf("rlsproc: envoy-rls did not exit within %v of SIGTERM", stopTimeout)
	}
	return p.ExitCode()
}

// Restart starts the same command again after Kill or Stop. With fixed
// ports in its arguments it serves on the same addresses.
func (p *Proc) Restart() {
	p.t.Helper()
	p.Kill()
	p.launch()
}

// ExitCode is the last run's exit code (-1 for a signal).
func (p *Proc) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc.ExitCode()
}

// Serving is what the "envoy-rls serving" log line says: the listeners'
// addresses ("off" for one that is off). Its fields are empty until the
// line is logged.
type Serving struct{ GRPC, HTTP, Debug string }

// ServingLine decodes the first "envoy-rls serving" line after the first
// skip lines of logs (envoy-rls's JSON logs); every test that starts the
// binary reads its addresses with it.
func ServingLine(logs string, skip int) Serving {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 0; sc.Scan(); n++ {
		if n < skip {
			continue
		}
		var line struct {
			Msg   string `json:"msg"`
			GRPC  string `json:"grpc_addr"`
			HTTP  string `json:"http_addr"`
			Debug string `json:"debug_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "envoy-rls serving" && line.GRPC != "" {
			return Serving{line.GRPC, line.HTTP, line.Debug}
		}
	}
	return Serving{}
}

// Main is a test package's TestMain: it builds the binary into a
// temporary directory and sets *bin to it, runs each check (a tool the
// tests need, such as envoytest.Binary: a missing one fails the package
// before any test runs, never skips it), runs the tests, removes the
// directory and exits with the tests' code.
func Main(m *testing.M, bin *string, checks ...func() error) {
	os.Exit(mainCode(m, bin, checks))
}

func mainCode(m *testing.M, bin *string, checks []func() error) int {
	dir, err := os.MkdirTemp("", "envoy-rls-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsproc:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, check := range checks {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}
