// Package refproc runs envoyproxy/ratelimit, the reference implementation
// envoy-rls is compared with, as a black box on free loopback ports, for
// tests that put it where envoy-rls goes (behind a real Envoy). It knows
// the reference's pinned version and where `make test-deps` installs it,
// and its settings: the environment variables it reads, its rule layout
// (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config) and its /healthcheck. The same
// environment starts envoy-rls in drop-in mode, so Env is shared. It
// imports none of the service's packages and must not be imported by
// non-test code.
package refproc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// Version is the envoyproxy/ratelimit module version the project compares
// with; the Makefile's REF_VERSION names the same one (a test checks).
const Version = "v1.4.1-0.20260122083618-3fb702589d36"

// Subdirectory is the RUNTIME_SUBDIRECTORY Env sets: rule files go in
// <root>/<Subdirectory>/config.
const Subdirectory = "ratelimit"

// startTimeout only keeps a broken setup from hanging a test.
const startTimeout = 30 * time.Second

// Binary returns the reference binary: $REF_BIN, else the one `make
// test-deps` installs under test/bench/.bin/<Version>/service_cmd.
func Binary() (string, error) {
	return childproc.Tool{
		Name:    "refproc: envoyproxy/ratelimit " + Version,
		Env:     "REF_BIN",
		Pinned:  []string{"test/bench/.bin/" + Version + "/service_cmd"},
		Install: "run make test-deps",
	}.Find()
}

// RulesDir is where the reference reads the rule files of root.
func RulesDir(root string) string { return filepath.Join(root, Subdirectory, "config") }

// Env is the reference's environment: rules under RulesDir(root), read
// once (RUNTIME_WATCH_ROOT=false; dotfiles ignored), Redis at redisAddr
// (host:port), statsd off, JSON logs at the binary's default level (envoy-rls
// logs the addresses it got at info), and the HTTP (/healthcheck), gRPC
// and debug listeners on loopback at the given ports (0 lets envoy-rls in
// drop-in mode choose; the reference needs real ones).
func Env(root, redisAddr string, httpPort, grpcPort, debugPort int) []string {
	return []string{
		"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=" + Subdirectory,
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(httpPort), "GRPC_PORT=" + strconv.Itoa(grpcPort), "DEBUG_PORT=" + strconv.Itoa(debugPort),
		"LOG_FORMAT=json",
	}
}

// Proc is one running reference process.
type Proc struct {
	GRPCAddr, HTTPAddr string
	Logs               *childproc.Buffer

	proc *childproc.Proc
}

// Start runs bin on Env(root, redisAddr, free ports) plus extra (t may be
// a driver's own childproc.TB, not only a test's), waits
// for its /healthcheck, and kills it at cleanup (printing its logs when t
// failed). A port lost to another process before the reference bound it
// is retried on fresh ports.
func Start(t childproc.TB, bin, root, redisAddr string, extra ...string) *Proc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports, err := childproc.FreePorts(3)
		if err != nil {
			t.Fatalf("refproc: %v", err)
		}
		p := &Proc{
			HTTPAddr: "127.0.0.1:" + strconv.Itoa(ports[0]),
			GRPCAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
			Logs:     &childproc.Buffer{},
		}
		cmd := exec.Command(bin)
		cmd.Env = append(append(os.Environ(), Env(root, redisAddr, ports[0], ports[1], ports[2])...), "LOG_LEVEL=warn")
		cmd.Env = append(cmd.Env, extra...)
		cmd.Stdout, cmd.Stderr = p.Logs, p.Logs
		if p.proc, err = childproc.Start(cmd); err != nil {
			t.Fatalf("refproc: start %s: %v", bin, err)
		}
		t.Cleanup(func() {
			p.Kill()
			if t.Failed() {
				t.Logf("envoyproxy/ratelimit logs (the last lines):\n%s", lastLines(p.Logs.String(), 40))
			}
		})
		err = p.waitHealthy()
		if err == nil {
			return p
		}
		p.Kill()
		if attempt == 3 || !strings.Contains(p.Logs.String(), "address already in use") {
			t.Fatalf("refproc: %v; logs:\n%s", err, lastLines(p.Logs.String(), 40))
		}
	}
}

func (p *Proc) waitHealthy() error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.proc.Done():
			return fmt.Errorf("envoyproxy/ratelimit exited before it was healthy")
		case <-time.After(25 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + p.HTTPAddr + "/healthcheck"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("envoyproxy/ratelimit not healthy within %v", startTimeout)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Kill ends the process (SIGKILL to its group) and waits for it.
func (p *Proc) Kill() {
	if !p.proc.Exited() {
		p.proc.Kill()
	}
}
