package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGRPCFlagsValidate(t *testing.T) {
	good := grpcFlags{maxConnAge: time.Hour, maxConnAgeGrace: time.Minute, keepaliveTime: time.Hour, keepaliveTimeout: time.Second, keepaliveMinTime: time.Second}
	tests := []struct {
		name   string
		mutate func(*grpcFlags)
		want   string // "" when valid
	}{
		{"defaults-like", func(*grpcFlags) {}, ""},
		{"age 0 means never", func(g *grpcFlags) { g.maxConnAge, g.maxConnAgeGrace = 0, 0 }, ""},
		{"negative age", func(g *grpcFlags) { g.maxConnAge = -time.Second }, "--grpc-max-connection-age: -1s must be positive"},
		{"negative grace", func(g *grpcFlags) { g.maxConnAgeGrace = -time.Second }, "--grpc-max-connection-age-grace"},
		{"zero keepalive time", func(g *grpcFlags) { g.keepaliveTime = 0 }, "--grpc-keepalive-time: 0s must be positive"},
		{"zero keepalive timeout", func(g *grpcFlags) { g.keepaliveTimeout = 0 }, "--grpc-keepalive-timeout"},
		{"zero min time", func(g *grpcFlags) { g.keepaliveMinTime = 0 }, "--grpc-keepalive-min-time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := good
			tt.mutate(&g)
			err := g.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("validate: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

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
