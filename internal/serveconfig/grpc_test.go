package serveconfig

import (
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
