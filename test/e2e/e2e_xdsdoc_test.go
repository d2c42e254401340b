package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// docProgram returns the Go program of docs/xds.md's "A minimal
// management server".
func docProgram(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/xds.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A minimal management server")
	if !ok {
		t.Fatal("docs/xds.md has no section \"A minimal management server\"")
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	prog, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/xds.md: no Go block in \"A minimal management server\"")
	}
	return prog
}

// TestXDSDocExample builds and runs docs/xds.md's management server and
// serves its rules: the documented program is the one that works.
func TestXDSDocExample(t *testing.T) {
	// Inside the module, so the build uses its go.mod; a dot directory, so
	// ./... never sees it.
	src, err := os.MkdirTemp(".", ".xdsdoc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(docProgram(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "xds-example")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+src).CombinedOutput(); err != nil {
		t.Fatalf("go build the docs/xds.md program: %v\n%s", err, out)
	}

	cp := exec.Command(bin, "-addr", "127.0.0.1:0")
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
		t.Fatalf("the docs/xds.md program did not log its address within %v", startTimeout)
	}

	s := startServer(t, serveOpts{Args: []string{"--config-source=xds", "--xds-server", cpAddr}})
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := s.ask("api", desc("path", "/login")).GetOverallCode(); got != want {
			t.Errorf("login %d: %v, want %v", i+1, got, want)
		}
	}
}
