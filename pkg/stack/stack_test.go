package stack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func newStack(t *testing.T, cfg Config) *Stack {
	t.Helper()
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestBackendSuite runs the backend suite on the stacks serve builds: the
// in-process store, and Redis (standalone, Cluster and Sentinel) behind the
// deny cache and the failure policy.
func TestBackendSuite(t *testing.T) {
	redisStack := func(client func(t *testing.T) *redisclient.Client) backendtest.Factory {
		return func(t *testing.T) backendtest.Backend {
			return newStack(t, Config{
				Redis: client(t), Timeout: 10 * time.Second, DenyCacheEntries: 1000, CallerTime: true,
			})
		}
	}
	for _, tc := range []struct {
		name string
		f    backendtest.Factory
	}{
		{"memory", func(t *testing.T) backendtest.Backend { return newStack(t, Config{}) }},
		{"standalone", redisStack(func(t *testing.T) *redisclient.Client {
			return &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)}
		})},
		{"cluster", redisStack(func(t *testing.T) *redisclient.Client {
			return &redisclient.Client{Cluster: redistest.SharedCluster(t).ClusterClient(t)}
		})},
		{"sentinel", redisStack(func(t *testing.T) *redisclient.Client {
			return &redisclient.Client{Single: redistest.SharedSentinel(t).FailoverClient(t)}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) { backendtest.Run(t, tc.f) })
	}
}

// TestReadiness: the in-process store is always ready; a Redis stack whose
// Redis is down is unready under the error failure mode and stays ready
// under the others, whose answers need no Redis.
func TestReadiness(t *testing.T) {
	ctx := context.Background()
	if err := newStack(t, Config{}).Ready(ctx); err != nil {
		t.Fatalf("memory stack: %v", err)
	}
	srv := redistest.Standalone(t)
	up := newStack(t, Config{Redis: &redisclient.Client{Single: srv.Client(t)}, Timeout: time.Second})
	if err := up.Ready(ctx); err != nil {
		t.Fatalf("Redis up: %v", err)
	}
	if up.Name() != "redis" || newStack(t, Config{}).Name() != "memory" {
		t.Fatalf("names %q, %q", up.Name(), newStack(t, Config{}).Name())
	}
	client := &redisclient.Client{Single: srv.Client(t)}
	errorMode := newStack(t, Config{Redis: client, Timeout: time.Second, FailureMode: failover.ModeError})
	allowMode := newStack(t, Config{Redis: client, Timeout: time.Second, FailureMode: failover.ModeAllow})
	srv.Stop(t)
	if err := errorMode.Ready(ctx); err == nil {
		t.Error("error mode with Redis down: ready")
	}
	if err := allowMode.Ready(ctx); err != nil {
		t.Errorf("allow mode with Redis down: %v, want ready", err)
	}
	d, err := allowMode.Apply(ctx, time.Now(), []algo.Check{backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.GCRA, 1), 1)})
	if err != nil || !d[0].Allowed {
		t.Errorf("allow mode with Redis down: %+v, %v; want admitted", d, err)
	}
	if _, err := errorMode.Apply(ctx, time.Now(), []algo.Check{backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.GCRA, 1), 1)}); err == nil {
		t.Error("error mode with Redis down: no error")
	}
}

// TestNewErrors: bad options are reported, not panicked on.
func TestNewErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	newStack(t, Config{Registerer: reg})
	if _, err := New(context.Background(), Config{Registerer: reg}); err == nil {
		t.Error("a second stack on one registry: no error")
	}
	client := &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)}
	_, err := New(context.Background(), Config{Redis: client, Timeout: time.Second, FailureMode: failover.Mode(9), Registerer: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "stack: ") {
		t.Errorf("an unknown failure mode: %v, want an error", err)
	}
}
