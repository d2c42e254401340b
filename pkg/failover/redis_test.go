package failover_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestBackendSuite: with Redis healthy the wrapper changes no decision. A
// server of its own, so that -count=N reruns start from empty keys.
func TestBackendSuite(t *testing.T) {
	client := redistest.Standalone(t).Client(t)
	backendtest.Run(t, func(t *testing.T) backendtest.Backend {
		b, err := redisalgo.New(client, redisalgo.Options{CallerTime: true})
		if err != nil {
			t.Fatalf("redisalgo.New: %v", err)
		}
		return mustNew(t, b, failover.Options{Ping: b.Ping, Mode: failover.ModeDeny, Timeout: 10 * time.Second})
	})
}

// counting wraps the Redis backend: it counts the calls that reach Redis,
// the ones Redis answered, the ones whose context had no deadline within
// the configured timeout, and the breaker state each call saw.
type counting struct {
	inner   *redisalgo.Backend
	timeout time.Duration
	fb      *failover.Backend // set after failover.New

	calls, ok, badDeadline atomic.Int64
	mu                     sync.Mutex
	states                 map[failover.State]int
}

func (c *counting) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	c.calls.Add(1)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > c.timeout {
		c.badDeadline.Add(1)
	}
	c.mu.Lock()
	c.states[c.fb.State()]++
	c.mu.Unlock()
	out, err := c.inner.Apply(ctx, now, checks)
	if err == nil {
		c.ok.Add(1)
	}
	return out, err
}

func (c *counting) Ping(ctx context.Context) error { return c.inner.Ping(ctx) }

func (c *counting) resetStates() map[failover.State]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.states
	c.states = map[failover.State]int{}
	return s
}

// TestRedisOutage kills (connection refused) or freezes (SIGSTOP:
// connections open, no replies) a real Redis under a bounded concurrent
// load, for every failure mode, and checks that:
//   - every call answers what the mode promises;
//   - every call returns well before 10× the timeout (a hung call fails the
//     test through its context deadline instead of hanging it), and the
//     primary always sees a deadline within the timeout;
//   - once the breaker is open, calls no longer reach Redis (only the
//     half-open probes do);
//   - after Redis returns, decisions come from Redis again without a new
//     Backend, and no goroutine is left behind.
func TestRedisOutage(t *testing.T) {
	faults := []struct {
		name      string
		brk, mend func(*redistest.Server, testing.TB)
	}{
		{name: "killed", brk: (*redistest.Server).Kill, mend: (*redistest.Server).Start},
		{name: "hung", brk: (*redistest.Server).Pause, mend: (*redistest.Server).Resume},
	}
	const cooldown = 500 * time.Millisecond
	modes := []struct {
		mode failover.Mode
		// verdict explains what is wrong with the n-th (0-based) answer for
		// one key while Redis is away, or returns "".
		verdict func(n int, d []algo.Decision, err error) string
	}{
		{failover.ModeError, func(_ int, d []algo.Decision, err error) string {
			if err == nil {
				return fmt.Sprintf("decisions %+v, want an error", d)
			}
			return ""
		}},
		{failover.ModeAllow, func(_ int, d []algo.Decision, err error) string {
			if err != nil || !d[0].Allowed || d[0].Remaining != 4 {
				return fmt.Sprintf("%+v, %v; want allowed, remaining 4", d, err)
			}
			return ""
		}},
		{failover.ModeDeny, func(_ int, d []algo.Decision, err error) string {
			if err != nil || d[0].Allowed || d[0].RetryAfter <= 0 || d[0].RetryAfter > cooldown.Microseconds() {
				return fmt.Sprintf("%+v, %v; want denied with 0 < RetryAfter ≤ the cool-down", d, err)
			}
			return ""
		}},
		{failover.ModeLocal, func(n int, d []algo.Decision, err error) string {
			// 4 per hour over 2 replicas: 2 per replica.
			if err != nil || d[0].Allowed != (n < 2) {
				return fmt.Sprintf("call %d: %+v, %v; want allowed=%v", n, d, err, n < 2)
			}
			return ""
		}},
	}
	for _, f := range faults {
		for _, m := range modes {
			t.Run(f.name+"/"+m.mode.String(), func(t *testing.T) {
				outage(t, m.mode, cooldown, f.brk, f.mend, m.verdict)
			})
		}
	}
}

func outage(t *testing.T, mode failover.Mode, cooldown time.Duration,
	brk, mend func(*redistest.Server, testing.TB), verdict func(int, []algo.Decision, error) string) {
	const (
		timeout   = 100 * time.Millisecond
		failures  = 3
		workers   = 4
		perWorker = 8
		// bound is how long a call may take before the test calls it hung:
		// generous, so a slow machine does not fail the test, and far below
		// the client's own 10 s timeouts, so only the failover timeout and
		// breaker can keep calls under it.
		bound = 10 * timeout
	)
	ignore := goleak.IgnoreCurrent()
	srv := redistest.Standalone(t)
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr, ContextTimeoutEnabled: true,
		DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
	})
	primary, err := redisalgo.New(client, redisalgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cnt := &counting{inner: primary, timeout: timeout, states: map[failover.State]int{}}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb := mustNew(t, cnt, failover.Options{
		Ping: cnt.Ping,
		Mode: mode, Local: local, ExpectedReplicas: 2, Timeout: timeout,
		Breaker:    failover.BreakerOptions{Failures: failures, Cooldown: cooldown},
		Registerer: prometheus.NewRegistry(),
	})
	cnt.fb = fb
	pol := algo.Policy{Algorithm: algo.TokenBucket, Limit: 4, Period: algo.Hour}
	key := func(user string) []algo.Check {
		return []algo.Check{{Domain: t.Name(), Entries: []algo.Entry{{Key: "user", Value: user}}, HashTag: -1, Policy: pol, Hits: 1}}
	}
	// call reports whether the call was still running at the bound.
	call := func(user string) (d []algo.Decision, expired bool, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		d, err = fb.Apply(ctx, time.Now(), key(user))
		return d, ctx.Err() != nil, err
	}
	if d, _, err := call("warm"); err != nil || !d[0].Allowed || cnt.ok.Load() != 1 {
		t.Fatalf("with Redis up: %+v, %v (%d answered by Redis)", d, err, cnt.ok.Load())
	}

	brk(srv, t)
	cnt.resetStates()
	callsBefore := cnt.calls.Load()
	var (
		mu    sync.Mutex
		wrong []string
		late  int
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for n := range perWorker {
				d, expired, err := call(fmt.Sprintf("down-%d", w))
				mu.Lock()
				if expired {
					late++
				} else if v := verdict(n, d, err); v != "" {
					wrong = append(wrong, v)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if late > 0 || len(wrong) > 0 {
		t.Errorf("Redis down, %d×%d calls: %d still running after %v, wrong answers: %q", workers, perWorker, late, bound, wrong)
	}
	if n := cnt.badDeadline.Load(); n > 0 {
		t.Errorf("%d calls reached Redis without a deadline within %v", n, timeout)
	}
	// Calls admitted while the breaker was closed can all be in flight
	// when the failures that open it arrive: at most failures+workers−1.
	if n := cnt.states[failover.StateClosed]; n > failures+workers-1 {
		t.Errorf("%d calls reached Redis with the breaker closed during the outage, want ≤ %d", n, failures+workers-1)
	}
	if n := cnt.calls.Load() - callsBefore; n >= workers*perWorker {
		t.Errorf("all %d calls reached the dead Redis; the breaker never opened", n)
	}
	if err := fb.Ping(context.Background()); err == nil {
		t.Errorf("Ping with Redis down: nil")
	}

	// Open: sequential calls reach Redis only as half-open probes.
	if fb.State() == failover.StateClosed {
		t.Fatalf("breaker closed after the outage began")
	}
	cnt.resetStates()
	const more = 100
	for i := range more {
		if _, expired, _ := call(fmt.Sprintf("open-%d", i)); expired {
			t.Fatalf("call %d with the breaker open still running after %v", i, bound)
		}
	}
	states := cnt.resetStates()
	if states[failover.StateClosed] > 0 || states[failover.StateHalfOpen] > more/10 {
		t.Errorf("with the breaker open, %d of %d calls reached Redis (states seen: %v); want half-open probes only, rarely", states[failover.StateClosed]+states[failover.StateHalfOpen], more, states)
	}

	mend(srv, t)
	answered := cnt.ok.Load()
	eventually.Holds(t, "Redis answers again through the breaker", func() bool {
		_, _, _ = call("probe")
		return cnt.ok.Load() > answered
	})
	// Redis, not the local store (2 per replica), decides: exactly 4.
	for n := range 5 {
		d, _, err := call("after")
		if err != nil || d[0].Allowed != (n < 4) {
			t.Fatalf("after recovery, call %d: %+v, %v; want allowed=%v from Redis", n, d, err, n < 4)
		}
	}
	if s := fb.State(); s != failover.StateClosed {
		t.Errorf("breaker %v after recovery, want closed", s)
	}
	if err := fb.Ping(context.Background()); err != nil {
		t.Errorf("Ping after recovery: %v", err)
	}

	primary.Close()
	if err := client.Close(); err != nil {
		t.Errorf("close client: %v", err)
	}
	srv.Close()
	goleak.VerifyNone(t, ignore)
}

// errorsByKind reads envoy_rls_backend_errors_total from reg.
func errorsByKind(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "envoy_rls_backend_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestDeadRedisFailsFast: with the client built as the service builds it
// (redisclient.ParseURL, then SetTimeouts), a Redis that refuses connections
// fails each call at once with a connection error, so the breaker opens
// after exactly Failures refusals and no call waits for its deadline.
// Without the fail-fast client settings go-redis dials 5 times 100 ms
// apart and retries each command with a backoff, so the first calls run
// into the deadline and the breaker counts timeouts instead.
func TestDeadRedisFailsFast(t *testing.T) {
	const (
		failures = 5
		calls    = 40
		// bound is the client timeout and the failover timeout: far above
		// what a refused dial costs (microseconds, even on a loaded
		// machine), below what go-redis's dial and command retries cost
		// (at least 400 ms per connection attempt).
		bound = time.Second
	)
	cases := []struct {
		name string
		// up starts Redis and returns its URL and a func that kills it.
		up func(t *testing.T) (url string, kill func())
	}{
		{"standalone", func(t *testing.T) (string, func()) {
			srv := redistest.Standalone(t)
			return "redis://" + srv.Addr, func() { srv.Kill(t) }
		}},
		{"cluster", func(t *testing.T) (string, func()) {
			c := redistest.Cluster(t)
			return "redis+cluster://" + strings.Join(c.Addrs, ","), func() {
				for _, n := range c.Nodes {
					n.Kill(t)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, kill := tc.up(t)
			reg := prometheus.NewRegistry()
			_, fb := redisFailover(t, url, bound, failover.Options{
				Breaker:    failover.BreakerOptions{Failures: failures, Cooldown: time.Hour},
				Registerer: reg,
			})
			// One key, so that on the cluster every call goes to one master.
			check := []algo.Check{{Domain: t.Name(), Entries: []algo.Entry{{Key: "user", Value: "dead"}}, HashTag: -1,
				Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 1000, Period: algo.Hour}, Hits: 1}}
			if _, err := fb.Apply(context.Background(), time.Now(), check); err != nil {
				t.Fatalf("with Redis up: %v", err)
			}

			kill()
			var slowest time.Duration
			for i := range calls {
				start := time.Now()
				d, err := fb.Apply(context.Background(), time.Now(), check)
				slowest = max(slowest, time.Since(start))
				if err == nil {
					t.Fatalf("call %d with Redis dead: %+v, want an error", i, d)
				}
			}
			// Measured, not asserted: timing depends on the machine.
			t.Logf("slowest of %d calls to a dead Redis: %v", calls, slowest)
			got := errorsByKind(t, reg)
			want := map[string]float64{"connection": failures, "circuit_open": calls - failures}
			for kind, n := range got {
				if n != want[kind] {
					t.Errorf("envoy_rls_backend_errors_total{kind=%q} = %v, want %v (all: %v)", kind, n, want[kind], got)
				}
			}
			if s := fb.State(); s != failover.StateOpen {
				t.Errorf("breaker %v after %d refused calls, want open", s, failures)
			}
		})
	}
}

// mustNew is failover.New, failing t on an error.
func mustNew(t testing.TB, primary failover.Limiter, opts failover.Options) *failover.Backend {
	t.Helper()
	fb, err := failover.New(primary, opts)
	if err != nil {
		t.Fatalf("failover.New: %v", err)
	}
	return fb
}

// redisFailover builds the Redis backend for url, with timeout as its
// client's timeouts, and the failure policy around it with opts, whose
// Ping and Timeout it fills in, and the shards (sharded).
func redisFailover(t testing.TB, url string, timeout time.Duration, opts failover.Options) (*redisalgo.Backend, *failover.Backend) {
	t.Helper()
	copts, err := redisclient.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	copts.SetTimeouts(timeout)
	client, err := redisclient.New(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rb, err := stack.RedisBackend(client, redisalgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.Close)
	opts.Ping, opts.Timeout = rb.Ping, timeout
	return rb, mustNew(t, rb, sharded(rb, opts))
}

// sharded returns opts with a breaker per master of rb, as pkg/stack sets
// them: rb asks the breakers itself (Routed) and names the shards.
func sharded(rb *redisalgo.Backend, opts failover.Options) failover.Options {
	opts.Routed, opts.ShardName = true, rb.ShardName
	return opts
}
