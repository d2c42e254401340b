package redisalgo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// t0 is the injected clock's start: a fixed instant, so decisions are exact.
var t0 = time.UnixMicro(1_700_000_000_000_000)

// clock is an injected time source tests move by hand.
type clock struct{ us atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.us.Store(t0.UnixMicro())
	return c
}

func (c *clock) now() time.Time      { return time.UnixMicro(c.us.Load()) }
func (c *clock) add(d time.Duration) { c.us.Add(d.Microseconds()) }
func (c *clock) opts() Options       { return Options{CallerTime: true} }

// open returns a Backend over client: NewCluster for the harness's
// cluster client, New for the others.
func open(client redis.UniversalClient, opts Options) (*Backend, error) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		return NewCluster(cc, opts)
	}
	return New(client, opts)
}

func newBackend(t testing.TB, client redis.UniversalClient, opts Options) *Backend {
	t.Helper()
	b, err := open(client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// onSharedCluster returns the shared cluster, a backend on it that
// evaluates at the test clock's start, and the test's key prefix.
func onSharedCluster(t *testing.T) (*redistest.ClusterSet, *Backend, string) {
	t.Helper()
	cl := redistest.SharedCluster(t)
	return cl, newBackend(t, cl.ClusterClient(t), newClock().opts()), redistest.KeyPrefix(t)
}

// remaining probes a limit without consuming (hits 0).
func remaining(t testing.TB, b *Backend, c algo.Check) int64 {
	t.Helper()
	c.Hits, c.Refund = 0, false
	return backendtest.Apply(t, b, t0.UnixMicro(), c)[0].Remaining
}

// standaloneAndCluster runs f against the shared standalone server and the
// shared cluster.
func standaloneAndCluster(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { f(t, redistest.SharedStandalone(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.SharedCluster(t).ClusterClient(t)) })
}

func TestApplyBurstThenDeny(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		for _, a := range algo.Algorithms {
			t.Run(a.String(), func(t *testing.T) {
				clk := newClock()
				b := newBackend(t, client, clk.opts())
				c := backendtest.UserCheck(redistest.KeyPrefix(t), "alice", backendtest.PerMinute(a, 3), 1)
				for i := range 3 {
					d := backendtest.Apply(t, b, clk.us.Load(), c)[0]
					if !d.Allowed || d.Remaining != int64(2-i) {
						t.Fatalf("hit %d: %+v, want allowed with remaining %d", i+1, d, 2-i)
					}
				}
				d := backendtest.Apply(t, b, clk.us.Load(), c)[0]
				// A sliding window may wait into the next window while the
				// previous one still weighs, so up to two periods.
				if d.Allowed || d.Remaining != 0 || d.ResetAfter <= 0 || d.ResetAfter > 2*algo.Minute {
					t.Fatalf("hit 4: %+v, want denied, remaining 0, 0 < reset ≤ 2m", d)
				}
				// Two windows later every algorithm admits again.
				clk.add(2 * time.Minute)
				if d := backendtest.Apply(t, b, clk.us.Load(), c)[0]; !d.Allowed {
					t.Fatalf("after 2m: %+v, want allowed", d)
				}
			})
		}
	})
}

func TestApplyOrderAndAllOrNothing(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		b := newBackend(t, client, newClock().opts())
		dom := redistest.KeyPrefix(t)
		wide := backendtest.UserCheck(dom, "wide", backendtest.PerMinute(algo.TokenBucket, 5), 1)
		narrow := backendtest.UserCheck(dom, "narrow", backendtest.PerMinute(algo.FixedWindow, 1), 1)

		d := backendtest.Apply(t, b, t0.UnixMicro(), wide, narrow)
		if !d[0].Allowed || d[0].Remaining != 4 || !d[1].Allowed || d[1].Remaining != 0 {
			t.Fatalf("first request: %+v, want wide 4 left, narrow 0 left", d)
		}
		d = backendtest.Apply(t, b, t0.UnixMicro(), wide, narrow)
		if d[1].Allowed {
			t.Fatalf("second request: narrow %+v, want denied", d[1])
		}
		// The denied request consumed nothing from wide.
		if got := remaining(t, b, wide); got != 4 {
			t.Errorf("wide remaining after a denied request = %d, want 4", got)
		}
		if got := d[0].Remaining; got != 4 {
			t.Errorf("denied request reports wide remaining %d, want 4", got)
		}
	})
}

func TestApplyEmpty(t *testing.T) {
	b := newBackend(t, redistest.SharedStandalone(t).Client(t), Options{})
	if d, err := b.Apply(context.Background(), t0, nil); err != nil || len(d) != 0 {
		t.Errorf("Apply(nil) = %v, %v; want no decisions, no error", d, err)
	}
}

// TestApplyServerTime runs without an injected clock: the script uses the
// Redis server's TIME.
func TestApplyServerTime(t *testing.T) {
	b := newBackend(t, redistest.SharedStandalone(t).Client(t), Options{})
	c := backendtest.UserCheck(redistest.KeyPrefix(t), "u", algo.Policy{Algorithm: algo.SlidingWindow, Limit: 2, Period: algo.Hour}, 1)
	got := []bool{backendtest.Apply(t, b, t0.UnixMicro(), c)[0].Allowed, backendtest.Apply(t, b, t0.UnixMicro(), c)[0].Allowed, backendtest.Apply(t, b, t0.UnixMicro(), c)[0].Allowed}
	if want := []bool{true, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("allowed = %v, want %v", got, want)
	}
}

// TestApplySpreadsOverSlots sends one request whose limits land in many
// slots on every master: no CROSSSLOT, every decision right.
func TestApplySpreadsOverSlots(t *testing.T) {
	cl, b, dom := onSharedCluster(t)
	var checks []algo.Check
	slots := map[int]bool{}
	masters := map[string]bool{}
	for i := range 40 {
		c := backendtest.UserCheck(dom, fmt.Sprint("user", i), backendtest.PerMinute(algo.Algorithms[i%len(algo.Algorithms)], 2), 1)
		checks = append(checks, c)
		slot := keySlot(keyOf(c))
		slots[slot] = true
		masters[cl.MasterForSlot(t, slot).Addr] = true
	}
	if len(slots) < 30 || len(masters) != 3 {
		t.Fatalf("test limits span %d slots on %d masters; want ≥30 slots on 3", len(slots), len(masters))
	}
	for round, want := range []int64{1, 0} {
		for i, d := range backendtest.Apply(t, b, t0.UnixMicro(), checks...) {
			if !d.Allowed || d.Remaining != want {
				t.Fatalf("round %d check %d: %+v, want allowed with %d left", round, i, d, want)
			}
		}
	}
	for i, d := range backendtest.Apply(t, b, t0.UnixMicro(), checks...) {
		if d.Allowed {
			t.Fatalf("round 3 check %d: %+v, want denied", i, d)
		}
	}
}

// TestHashTagGroupsOneUser: with a hash tag on the user entry, one user's
// limits form one slot group, so even on a cluster they are evaluated by
// one atomic script call.
func TestHashTagGroupsOneUser(t *testing.T) {
	_, b, dom := onSharedCluster(t)
	var checks []algo.Check
	for i, a := range algo.Algorithms {
		checks = append(checks, algo.Check{
			Domain:  dom,
			Entries: entries("user", "alice", "path", fmt.Sprint("/p", i)),
			HashTag: 0,
			Policy:  backendtest.PerMinute(a, int64(i+1)),
			Hits:    1,
		})
	}
	s := new(scratch)
	s.reset(len(checks))
	for range checks {
		s.nows = append(s.nows, 0)
	}
	b.keys(s, checks)
	b.group(s, checks)
	if len(s.calls) != 1 {
		t.Fatalf("%d slot groups for one user's %d limits, want 1", len(s.calls), len(checks))
	}
	// The first policy admits one hit; the second request is denied by it
	// alone and must leave every other limit untouched.
	backendtest.Apply(t, b, t0.UnixMicro(), checks...)
	d := backendtest.Apply(t, b, t0.UnixMicro(), checks...)
	if d[0].Allowed {
		t.Fatalf("second request: %+v, want the 1/min limit to deny", d[0])
	}
	for i, c := range checks[1:] {
		if got, want := remaining(t, b, c), c.Policy.Limit-1; got != want {
			t.Errorf("limit %d (%s) remaining = %d, want %d", i+1, c.Policy.Algorithm, got, want)
		}
	}
}

// TestClusterRefund: when a later slot group denies, the group that already
// consumed is refunded in the same request.
func TestClusterRefund(t *testing.T) {
	_, b, dom := onSharedCluster(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			wide := backendtest.UserCheck(dom, "wide-"+a.String(), backendtest.PerMinute(a, 10), 2)
			narrow := backendtest.UserCheck(dom, "narrow-"+a.String(), backendtest.PerMinute(a, 1), 1)
			if keySlot(keyOf(wide)) == keySlot(keyOf(narrow)) {
				t.Fatal("test limits share a slot; pick other names")
			}
			if d := backendtest.Apply(t, b, t0.UnixMicro(), wide, narrow); !d[0].Allowed || !d[1].Allowed {
				t.Fatalf("first request: %+v, want both allowed", d)
			}
			before := remaining(t, b, wide)
			// Both orders: the denying group may come first or last in the
			// pipeline.
			for _, req := range [][]algo.Check{{wide, narrow}, {narrow, wide}} {
				d := backendtest.Apply(t, b, t0.UnixMicro(), req...)
				if d[0].Allowed && d[1].Allowed {
					t.Fatalf("request %v: %+v, want narrow denied", req, d)
				}
				if got := remaining(t, b, wide); got != before {
					t.Errorf("wide remaining after a denied request = %d, want %d (refunded)", got, before)
				}
			}
		})
	}
}

// TestClusterRefundKeepsRequestRefunds: a request's own refunds
// (is_negative_hits) apply even when the request is denied, and are not
// undone by the all-or-nothing refund.
func TestClusterRefundKeepsRequestRefunds(t *testing.T) {
	_, b, dom := onSharedCluster(t)
	given := backendtest.UserCheck(dom, "given", backendtest.PerMinute(algo.FixedWindow, 10), 3)
	narrow := backendtest.UserCheck(dom, "narrow", backendtest.PerMinute(algo.FixedWindow, 1), 1)
	backendtest.Apply(t, b, t0.UnixMicro(), given, narrow)
	back := given
	back.Refund, back.Hits = true, 2
	backendtest.Apply(t, b, t0.UnixMicro(), back, narrow) // narrow denies
	if got := remaining(t, b, given); got != 9 {
		t.Errorf("remaining = %d, want 9 (10 - 3 + 2)", got)
	}
}

func TestApplyScriptError(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		b := newBackend(t, client, newClock().opts())
		c := backendtest.UserCheck(redistest.KeyPrefix(t), "u", backendtest.PerMinute(algo.TokenBucket, 3), 1)
		// A key of the wrong type makes the script fail inside Redis.
		if err := client.LPush(context.Background(), string(keyOf(c)), "x").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := b.Apply(context.Background(), t0, []algo.Check{c})
		if err == nil || !strings.HasPrefix(err.Error(), "redisalgo: ") {
			t.Fatalf("Apply on a wrong-type key: err = %v, want a redisalgo error", err)
		}
	})
}

func TestApplyCanceled(t *testing.T) {
	b := newBackend(t, redistest.SharedStandalone(t).Client(t), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Apply(ctx, t0, []algo.Check{backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.GCRA, 1), 1)}); err == nil {
		t.Error("Apply with a canceled context succeeded")
	}
}

// TestScriptFlushAndRestart runs a stream of requests through SCRIPT FLUSH
// and a Redis restart: no request fails, and decisions stay exact.
func TestScriptFlushAndRestart(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	client := srv.Client(t)
	clk := newClock()
	b := newBackend(t, client, clk.opts())
	dom := redistest.KeyPrefix(t)
	for i := range 60 {
		switch i {
		case 20:
			if err := client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		case 40:
			// The restart also loses the counters (no persistence).
			srv.Restart(t)
		}
		c := backendtest.UserCheck(dom, fmt.Sprint("u", i/20), backendtest.PerMinute(algo.TokenBucket, 5), 1)
		d, err := b.Apply(ctx, clk.now(), []algo.Check{c})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := i%20 < 5; d[0].Allowed != want {
			t.Fatalf("request %d: %+v, want allowed=%v", i, d[0], want)
		}
	}
	if n := b.noscript.Load(); n != 2 {
		t.Errorf("%d calls resent after NOSCRIPT, want 2 (after the flush and after the restart)", n)
	}
}

// TestClusterScriptFlush: SCRIPT FLUSH on every node, then requests over
// every master still succeed.
func TestClusterScriptFlush(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	client := cl.ClusterClient(t)
	b := newBackend(t, client, newClock().opts())
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dom := redistest.KeyPrefix(t)
	var checks []algo.Check
	for i := range 12 {
		checks = append(checks, backendtest.UserCheck(dom, fmt.Sprint("u", i), backendtest.PerMinute(algo.SlidingWindow, 3), 1))
	}
	for i, d := range backendtest.Apply(t, b, t0.UnixMicro(), checks...) {
		if !d.Allowed || d.Remaining != 2 {
			t.Errorf("check %d after SCRIPT FLUSH: %+v, want allowed with 2 left", i, d)
		}
	}
	if b.noscript.Load() == 0 {
		t.Error("no call was resent after NOSCRIPT")
	}
}

func TestLazyLoad(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill(t)
	b, err := New(srv.Client(t), Options{LazyLoad: true})
	if err != nil {
		t.Fatalf("New with LazyLoad on a dead server: %v", err)
	}
	if err := b.Ping(context.Background()); err == nil {
		t.Error("Ping of a dead server succeeded")
	}
	srv.Start(t)
	if err := b.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	// The script was never loaded; the first request loads it.
	if d := backendtest.Apply(t, b, t0.UnixMicro(), backendtest.UserCheck(redistest.KeyPrefix(t), "u", backendtest.PerMinute(algo.GCRA, 1), 1)); !d[0].Allowed {
		t.Errorf("first request: %+v, want allowed", d[0])
	}
	if n := b.noscript.Load(); n != 1 {
		t.Errorf("%d calls resent after NOSCRIPT, want 1", n)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

func TestNewFailsWithoutRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "load script") {
		t.Errorf("New on a dead server: err = %v, want a load script error", err)
	}
}

// wrappedCluster is a cluster client wrapped as a caller might wrap it
// (for hooks or tracing): its type is no longer *redis.ClusterClient.
type wrappedCluster struct{ *redis.ClusterClient }

// spread returns checks whose keys lie in n different slots.
func spread(t *testing.T, dom string, n int) []algo.Check {
	t.Helper()
	var checks []algo.Check
	slots := map[int]bool{}
	for i := 0; len(slots) < n; i++ {
		c := backendtest.UserCheck(dom, fmt.Sprint("user", i), backendtest.PerMinute(algo.FixedWindow, 2), 1)
		if slot := keySlot(keyOf(c)); !slots[slot] {
			slots[slot] = true
			checks = append(checks, c)
		}
	}
	return checks
}

// TestNewRefusesClusterClients: New, for standalone Redis and Sentinel,
// refuses a cluster client, wrapped or not, with an error naming
// NewCluster, instead of sending a request's keys of several slots in one
// script call, which Redis refuses with CROSSSLOT. NewCluster takes the
// wrapped client and groups by slot.
func TestNewRefusesClusterClients(t *testing.T) {
	cc := redistest.SharedCluster(t).ClusterClient(t)
	checks := spread(t, redistest.KeyPrefix(t), 8)
	for _, tc := range []struct {
		name   string
		client Client
	}{
		{"cluster client", cc},
		{"wrapped cluster client", wrappedCluster{cc}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.client, Options{CallerTime: true, LazyLoad: true})
			if err == nil {
				defer b.Close()
				_, err := b.Apply(context.Background(), t0, checks)
				t.Fatalf("New accepted a %T; a request over %d slots then got %v", tc.client, len(checks), err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "redisalgo: New: ") || !strings.Contains(msg, "NewCluster") || !strings.Contains(msg, "CROSSSLOT") {
				t.Errorf("New(%T) error %q, want a redisalgo error naming NewCluster and CROSSSLOT", tc.client, msg)
			}
		})
	}
	b, err := NewCluster(wrappedCluster{cc}, Options{CallerTime: true})
	if err != nil {
		t.Fatalf("NewCluster(wrapped): %v", err)
	}
	t.Cleanup(b.Close)
	for i, d := range backendtest.Apply(t, b, t0.UnixMicro(), checks...) {
		if !d.Allowed || d.Remaining != 1 {
			t.Errorf("check %d through the wrapped cluster client: %+v, want allowed with 1 left", i, d)
		}
	}
	if _, err := NewCluster(nil, Options{}); err == nil {
		t.Error("NewCluster(nil) succeeded")
	}
}

// load runs workers that apply requests on fresh keys until stop is closed
// or each ran max requests, and counts errors. It returns a wait function.
func load(t *testing.T, b *Backend, dom string, stop <-chan struct{}, workers, max int) (wait func() (ok, failed int64)) {
	t.Helper()
	var wg sync.WaitGroup
	var okN, failedN atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := range max {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				c1 := backendtest.UserCheck(dom, fmt.Sprintf("w%d-%d", w, i), backendtest.PerMinute(algo.TokenBucket, 100), 1)
				c2 := backendtest.UserCheck(dom, fmt.Sprintf("w%d", w), algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1 << 40, Period: algo.Hour}, 1)
				if _, err := b.Apply(ctx, t0, []algo.Check{c1, c2}); err != nil {
					failedN.Add(1)
					time.Sleep(20 * time.Millisecond)
				} else {
					okN.Add(1)
				}
				cancel()
			}
		})
	}
	return func() (int64, int64) {
		wg.Wait()
		return okN.Load(), failedN.Load()
	}
}

// applyEventually retries Apply until it succeeds (a failover in progress)
// and returns its decisions.
func applyEventually(t *testing.T, b *Backend, checks ...algo.Check) []algo.Decision {
	t.Helper()
	var d []algo.Decision
	eventually.True(t, "Apply succeeds", func() (bool, string) {
		var err error
		d, err = b.Apply(context.Background(), t0, checks)
		return err == nil, fmt.Sprint(err)
	})
	return d
}

// exactAfter checks that a fresh limit of 3 admits exactly 3.
func exactAfter(t *testing.T, b *Backend, c algo.Check) {
	t.Helper()
	for i := range 4 {
		d := applyEventually(t, b, c)[0]
		if want := i < 3; d.Allowed != want || (want && d.Remaining != int64(2-i)) {
			t.Fatalf("hit %d after failover: %+v, want allowed=%v", i+1, d, want)
		}
	}
}

// TestClusterFailover: CLUSTER FAILOVER under load, with the replica's
// script cache flushed first so that the new master answers NOSCRIPT.
func TestClusterFailover(t *testing.T) {
	ctx := context.Background()
	cl, b, dom := onSharedCluster(t)
	probe := backendtest.UserCheck(dom, "probe", backendtest.PerMinute(algo.TokenBucket, 3), 1)
	slot := keySlot(keyOf(probe))
	replica := cl.ReplicaOf(t, cl.MasterForSlot(t, slot))
	if err := replica.Client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	wait := load(t, b, dom+"load", stop, 4, 2000)
	backendtest.Apply(t, b, t0.UnixMicro(), probe)
	cl.Failover(t, slot)
	// CLUSTER FAILOVER is lossless: the hit before it counts.
	if d := applyEventually(t, b, probe)[0]; !d.Allowed || d.Remaining != 1 {
		t.Errorf("after failover: %+v, want allowed with 1 left", d)
	}
	if b.noscript.Load() == 0 {
		t.Error("the promoted replica had no script, but no call was resent after NOSCRIPT")
	}
	close(stop)
	ok, failed := wait()
	t.Logf("load during failover: %d ok, %d failed", ok, failed)
	if ok == 0 {
		t.Error("no request succeeded during the failover run")
	}
	exactAfter(t, b, backendtest.UserCheck(dom, "fresh", backendtest.PerMinute(algo.TokenBucket, 3), 1))
}

// TestClusterKillMaster: a master dies under load; after its replica is
// promoted, requests succeed again and decide exactly.
func TestClusterKillMaster(t *testing.T) {
	cl, b, dom := onSharedCluster(t)
	probe := backendtest.UserCheck(dom, "probe", backendtest.PerMinute(algo.TokenBucket, 3), 1)
	slot := keySlot(keyOf(probe))

	stop := make(chan struct{})
	wait := load(t, b, dom+"load", stop, 4, 2000)
	killed, _ := cl.KillMaster(t, slot)
	exactAfter(t, b, probe)
	close(stop)
	ok, failed := wait()
	t.Logf("load during master kill: %d ok, %d failed", ok, failed)
	cl.Rejoin(t, killed)
	exactAfter(t, b, backendtest.UserCheck(dom, "fresh", backendtest.PerMinute(algo.GCRA, 3), 1))
}

// TestSentinelFailover: the master dies; the failover client follows the
// promoted replica and decisions are exact again.
func TestSentinelFailover(t *testing.T) {
	se := redistest.SharedSentinel(t)
	b := newBackend(t, se.FailoverClient(t), newClock().opts())
	dom := redistest.KeyPrefix(t)
	if d := backendtest.Apply(t, b, t0.UnixMicro(), backendtest.UserCheck(dom, "before", backendtest.PerMinute(algo.TokenBucket, 3), 1)); !d[0].Allowed {
		t.Fatalf("before failover: %+v", d[0])
	}
	stop := make(chan struct{})
	wait := load(t, b, dom+"load", stop, 2, 2000)
	killed, promoted := se.KillMaster(t)
	exactAfter(t, b, backendtest.UserCheck(dom, "after", backendtest.PerMinute(algo.TokenBucket, 3), 1))
	close(stop)
	ok, failed := wait()
	t.Logf("load during sentinel failover: %d ok, %d failed", ok, failed)
	// The counter lives on the new master.
	key := string(keyOf(backendtest.UserCheck(dom, "after", backendtest.PerMinute(algo.TokenBucket, 3), 1)))
	if n, err := promoted.Client(t).Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Errorf("EXISTS on promoted master %s = %d, %v; want the limit's key", promoted.Addr, n, err)
	}
	se.Rejoin(t, killed)
}

// BenchmarkApply measures one 2-limit request against a real standalone
// server, one at a time (a lone request goes out at once, batched or not)
// and from 32 concurrent goroutines, where batching shares round trips; it
// reports the mean commands per round trip and Redis's CPU per Apply
// (used_cpu_user + used_cpu_sys; Redis shares the machine with the
// benchmark, so this is an upper bound on what it costs on a core of its
// own).
func BenchmarkApply(b *testing.B) {
	client := redistest.SharedStandalone(b).Client(b)
	dom := redistest.KeyPrefix(b)
	checks := []algo.Check{
		backendtest.UserCheck(dom, "bench", algo.Policy{Algorithm: algo.TokenBucket, Limit: 1 << 30, Period: algo.Second}, 1),
		backendtest.UserCheck(dom, "bench", algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1 << 30, Period: algo.Minute}, 1),
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name     string
		noBatch  bool
		parallel int
	}{
		{"serial", false, 0},
		{"serial/nobatch", true, 0},
		{"c32", false, 32},
		{"c32/nobatch", true, 32},
	} {
		b.Run(bc.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			be := newBackend(b, client, Options{NoBatch: bc.noBatch, Registerer: reg})
			b.ReportAllocs()
			cpu0 := redisCPU(b, client)
			if bc.parallel == 0 {
				for b.Loop() {
					if _, err := be.Apply(ctx, t0, checks); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(bc.parallel / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := be.Apply(ctx, t0, checks); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric((redisCPU(b, client)-cpu0)*1e6/float64(b.N), "redis-µs/op")
			if !bc.noBatch {
				if n, sum := batchStats(b, reg); n > 0 {
					b.ReportMetric(sum/float64(n), "cmds/pipeline")
				}
			}
		})
	}
}

// infoSum returns the sum of the numbers that follow prefixes at the start
// of lines of INFO section (up to a comma, for commandstats' lists).
func infoSum(tb testing.TB, client *redis.Client, section string, prefixes ...string) float64 {
	tb.Helper()
	info, err := client.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, p := range prefixes {
			rest, ok := strings.CutPrefix(line, p)
			if !ok {
				continue
			}
			rest, _, _ = strings.Cut(rest, ",")
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				tb.Fatalf("INFO %s line %q: %v", section, line, err)
			}
			sum += v
		}
	}
	return sum
}

// redisCPU returns the CPU seconds the Redis server has used.
func redisCPU(tb testing.TB, client *redis.Client) float64 {
	return infoSum(tb, client, "cpu", "used_cpu_user:", "used_cpu_sys:")
}

// BenchmarkScript measures apply.lua alone, without the backend: one
// request of one limit per decision, merged 10 to an EVALSHA (about what
// 32 concurrent callers share) or alone (what a moderate load sends), 4
// connections each keeping 4 calls in flight, 10 000 random users, at
// Redis's TIME. It reports Redis's CPU per decision, the figure
// BENCHMARKS.md compares with the load runs: Redis shares the machine with
// the benchmark, but here nothing else competes.
func BenchmarkScript(b *testing.B) {
	for _, perCall := range []int{10, 1} {
		b.Run(fmt.Sprintf("per-call=%d", perCall), func(b *testing.B) { benchmarkScript(b, perCall) })
	}
}

func benchmarkScript(b *testing.B, perCall int) {
	const users = 10_000
	client := redistest.SharedStandalone(b).Client(b)
	for _, a := range algo.Algorithms {
		b.Run(a.String(), func(b *testing.B) {
			p := algo.Policy{Algorithm: a, Limit: 1 << 20, Period: algo.Second}
			if a == algo.SlidingLog {
				p.Limit = 1000
			}
			scriptLoad(b, client, p, perCall, users)
		})
	}
}

// scriptLoad sends b.N one-hit checks of policy p on random counters of
// users through apply.lua, perCall per EVALSHA, pipelined 4 deep on 4
// connections at Redis's TIME, and reports Redis's CPU per decision.
func scriptLoad(b *testing.B, client *redis.Client, p algo.Policy, perCall, users int) {
	const conns, depth = 4, 4
	ctx := context.Background()
	if err := applyScript.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}
	dom := redistest.KeyPrefix(b)
	calls := max(b.N/perCall, 1)
	next := make(chan int, calls)
	for i := range calls {
		next <- i
	}
	close(next)
	cpu0 := redisCPU(b, client)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(len(next)), 7))
			pipe := client.Pipeline()
			for {
				n := 0
				for range depth {
					if _, ok := <-next; !ok {
						break
					}
					keys := make([]string, perCall)
					var args []any
					for k := range keys {
						c := backendtest.UserCheck(dom, strconv.Itoa(r.IntN(users)), p, 1)
						keys[k] = string(keyOf(c))
						args = appendApplyArgs(args, 0, []algo.Check{c})
					}
					applyScript.EvalSha(ctx, pipe, keys, args...)
					n++
				}
				if n == 0 {
					return
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric((redisCPU(b, client)-cpu0)*1e6/float64(calls*perCall), "redis-µs/decision")
	b.ReportMetric(0, "ns/op")
}
