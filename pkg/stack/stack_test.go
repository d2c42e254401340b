package stack

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/lease"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
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
	t.Cleanup(s.Close) // after Run's end: cleanups run last first
	backendtest.RunInBackground(t, s.Run)
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
		t.Run(tc.name, func(t *testing.T) {
			backendtest.Run(t, tc.f)
			t.Run("Peek", func(t *testing.T) {
				backendtest.RunPeek(t, func(t *testing.T) backendtest.Peeker { return tc.f(t).(*Stack) })
			})
		})
	}
}

// TestLeaseLayer: with Lease options the stack serves a hot counter from
// a lease (counted in the metrics), answers from the lease in hand while
// Redis is down, and at the end of Run counts the hits it could not
// return.
func TestLeaseLayer(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	st, err := New(ctx, Config{
		Redis: &redisclient.Client{Single: srv.Client(t)}, Timeout: time.Second, CallerTime: true,
		DenyCacheEntries: 1000, Registerer: reg,
		Lease: lease.Options{TTL: time.Hour, HotRPS: 1, MaxFraction: 0.5},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	stop := backendtest.RunInBackground(t, st.Run)
	hot := backendtest.UserCheck("d", "hot", algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Hour, Burst: 100_000}, 1)
	hot.Lease = true
	cold := backendtest.UserCheck("d", "cold", backendtest.PerMinute(algo.GCRA, 100), 1)
	now := backendtest.Start
	// An hour's TTL makes 3600 hits in one window hot at 1 rps.
	for range 4000 {
		backendtest.Apply(t, st, now, hot)
	}
	if granted := counterValue(t, reg, "envoy_rls_lease_granted_total"); granted < 1 {
		t.Fatalf("granted %v leases, want some", granted)
	}
	srv.Stop(t)
	if d, err := st.Apply(ctx, time.UnixMicro(now), []algo.Check{hot}); err != nil || !d[0].Allowed {
		t.Fatalf("hot counter with Redis down: %+v, %v; want answered from the lease", d, err)
	}
	if _, err := st.Apply(ctx, time.UnixMicro(now), []algo.Check{cold}); err == nil {
		t.Fatal("cold counter with Redis down: no error")
	}
	stop()
	if expired := counterValue(t, reg, "envoy_rls_lease_hits_expired_total"); expired < 1 {
		t.Fatalf("%v hits expired at the end of Run with Redis down, want the lease's rest", expired)
	}
	if local := counterValue(t, reg, "envoy_rls_lease_local_decisions_total"); local < 1 {
		t.Fatalf("%v local decisions", local)
	}
}

// TestAnsweredWhileBreakerOpen (issue 39, item 8): the breakers are asked
// by the Redis backend when a request reaches it, so while Redis's
// breaker is open a request that the lease layer (a hot counter's lease in
// hand) or the deny cache (a denial it knows) answers without Redis is
// still answered by them; a request that needs Redis gets the failure mode
// (here the error mode's ErrOpen), a request mixing both included.
func TestAnsweredWhileBreakerOpen(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	st := newStack(t, Config{
		Redis: &redisclient.Client{Single: srv.Client(t)}, Timeout: time.Second, CallerTime: true,
		FailureMode: failover.ModeError, Breaker: failover.BreakerOptions{Failures: 1, Cooldown: time.Hour},
		DenyCacheEntries: 1000, Lease: lease.Options{TTL: time.Hour, HotRPS: 1, MaxFraction: 0.5},
	})
	hot := backendtest.UserCheck("d", "hot", algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Hour, Burst: 100_000}, 1)
	hot.Lease = true
	denied := backendtest.UserCheck("d", "denied", backendtest.PerMinute(algo.FixedWindow, 1), 1)
	cold := backendtest.UserCheck("d", "cold", backendtest.PerMinute(algo.GCRA, 100), 1)
	now := backendtest.Start
	apply := func(checks ...algo.Check) ([]algo.Decision, error) {
		t.Helper()
		return st.Apply(ctx, time.UnixMicro(now), checks)
	}
	// An hour's TTL makes 3600 hits in one window hot at 1 rps: the hot
	// counter holds a lease.
	for range 4000 {
		backendtest.Apply(t, st, now, hot)
	}
	// The second hit is denied by Redis, and the deny cache keeps it.
	for i, want := range []bool{true, false} {
		if d, err := apply(denied); err != nil || d[0].Allowed != want {
			t.Fatalf("denied counter, hit %d with Redis up: %+v, %v; want allowed %v", i, d, err, want)
		}
	}

	srv.Stop(t)
	// The first request that needs Redis fails and opens the breaker; the
	// next gets ErrOpen without a call.
	if _, err := apply(cold); err == nil || errors.Is(err, failover.ErrOpen) {
		t.Fatalf("cold counter, Redis down: %v; want the call's error", err)
	}
	if _, err := apply(cold); !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("cold counter, breaker open: %v; want ErrOpen", err)
	}
	for i := range 3 {
		if d, err := apply(hot); err != nil || !d[0].Allowed {
			t.Fatalf("hot counter %d, breaker open: %+v, %v; want answered from the lease", i, d, err)
		}
		if d, err := apply(denied); err != nil || d[0].Allowed || d[0].RetryAfter <= 0 {
			t.Fatalf("denied counter %d, breaker open: %+v, %v; want the deny cache's denial", i, d, err)
		}
		if _, err := apply(hot, cold); !errors.Is(err, failover.ErrOpen) {
			t.Fatalf("hot and cold counters %d, breaker open: %v; want ErrOpen (cold needs Redis)", i, err)
		}
	}
}

// counterValue returns the value of the unlabelled counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
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

// TestRedisClient: the stack hands out the main Redis client, for state
// replicas share beside the counters (warm-up anchors), and nil for the
// in-process store.
func TestRedisClient(t *testing.T) {
	main := &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)}
	persec := &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)}
	for _, tc := range []struct {
		name string
		cfg  Config
		want *redisclient.Client
	}{
		{"memory", Config{}, nil},
		{"redis", Config{Redis: main, Timeout: 10 * time.Second}, main},
		{"with per-second redis", Config{Redis: main, PerSecondRedis: persec, Timeout: 10 * time.Second}, main},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newStack(t, tc.cfg).Redis(); got != tc.want {
				t.Errorf("Redis() = %p, want %p", got, tc.want)
			}
		})
	}
}

// TestReadyCounterHashes: two replicas (stacks) on one Redis with
// different counter-hash counts: the first records its count, the second
// is not ready, in every failure mode, with an error naming both counts;
// a replica with the first's count is ready (issue 39).
func TestReadyCounterHashes(t *testing.T) {
	for _, mode := range []failover.Mode{failover.ModeError, failover.ModeAllow} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Standalone(t)
			replica := func(hashes int) *Stack {
				return newStack(t, Config{Redis: &redisclient.Client{Single: srv.Client(t)}, Timeout: 5 * time.Second, FailureMode: mode, CounterHashes: hashes})
			}
			if err := replica(16).Ready(ctx); err != nil {
				t.Fatalf("the first replica (16 counter hashes) is not ready: %v", err)
			}
			err := replica(64).Ready(ctx)
			if !errors.Is(err, redisalgo.ErrCounterHashesMismatch) || !strings.Contains(err.Error(), "this replica's is 64, the deployment's is 16") {
				t.Fatalf("a replica with 64 counter hashes: Ready = %v; want unready naming 64 and 16", err)
			}
			if err := replica(16).Ready(ctx); err != nil {
				t.Errorf("a replica with the deployment's 16 is not ready: %v", err)
			}
		})
	}
}
