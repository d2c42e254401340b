// Package childproc is the test kit's shared machinery for the child
// processes tests and the bench driver run on loopback (redis-server,
// Prometheus, Envoy, envoy-rls, the reference): the one process starter
// (Start: its own process group, killed with its starter, reaped once),
// the one tool finder (Tool, one search policy for every program the
// repository does not build), the repository root (Root, RepoPath,
// ReadRepoFile: never the working directory), free loopback ports and a
// buffer a child's output can be written to while a test reads it. It
// knows no particular program, and must not be imported by non-test code
// outside test/.
package childproc

import (
	"fmt"
	"net"
	"strings"
	"sync"
)

// FreePorts returns n distinct loopback ports that were free a moment ago.
// The listeners stay open until all n are chosen so that the kernel cannot
// hand out one port twice; a child may still lose a port to another process
// before binding it, so callers retry on another port when that happens.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("childproc: allocate loopback port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort returns one loopback port that was free a moment ago (see
// FreePorts).
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// TB is the part of testing.TB that helpers starting children use, so a
// driver without a *testing.T (the bench) can start them too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
}

// Buffer collects a child's output, written by the goroutines exec starts,
// while a test reads it; it is safe for concurrent use. The zero value is
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
