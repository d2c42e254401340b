package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenGRPCRefusesNonSocket keeps a regular file at the socket path:
// it is not stale state to clear, so listening must fail and leave it.
func TestListenGRPCRefusesNonSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "rls")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rls.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := listenGRPC("unix://" + path); err == nil {
		l.Close()
		t.Fatal("listened over a regular file")
	} else if !strings.Contains(err.Error(), "--grpc-addr") || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("error %q: want one naming --grpc-addr and the file", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Errorf("the file was changed: %q, %v", b, err)
	}
}
