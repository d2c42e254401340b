package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// shardOf is the routing of these tests' primary: a check's shard is its
// entry's value, a number.
func shardOf(c algo.Check) int {
	n, err := strconv.Atoi(c.Entries[0].Value)
	if err != nil {
		return -1
	}
	return n
}

func onShard(n int) algo.Check {
	c := chk(5, 0, 1, false)
	c.Entries = []algo.Entry{{Key: "shard", Value: strconv.Itoa(n)}}
	return c
}

// shardError is what a primary that knows its shards returns, like
// redisalgo.ShardError.
type shardError struct {
	shards []int
	err    error
}

func (e *shardError) Error() string       { return fmt.Sprintf("shards %v: %v", e.shards, e.err) }
func (e *shardError) Unwrap() error       { return e.err }
func (e *shardError) FailedShards() []int { return e.shards }

// shardFake is a routed primary with shards, as pkg/redisalgo is: it asks
// the shard gate in its context with the distinct shards of a request's
// checks before anything else (but for a request all on local shards,
// which it admits without asking), and returns the gate's refusal. Then checks
// on a dead shard fail the request with a shardError naming the dead
// shards it touched (or with a plain error when plain is set); the others
// are admitted. A request on the held shard signals entered and waits for
// gate first. It counts the calls that reached it per shard.
type shardFake struct {
	mu    sync.Mutex
	dead  map[int]bool
	plain bool
	calls map[int]int

	held    int
	entered chan struct{}
	gate    chan struct{}

	// local answers a request whose checks are all on its shards without
	// asking the gate, as a lease in hand does.
	local map[int]bool
	// twice asks the gate a second time with every shard repeated.
	twice bool
}

func (f *shardFake) setDead(shards ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = map[int]bool{}
	for _, s := range shards {
		f.dead[s] = true
	}
}

func (f *shardFake) Apply(ctx context.Context, _ time.Time, checks []algo.Check) ([]algo.Decision, error) {
	f.mu.Lock()
	local := !slices.ContainsFunc(checks, func(c algo.Check) bool { return !f.local[shardOf(c)] })
	twice := f.twice
	f.mu.Unlock()
	if local {
		return admitAll(len(checks)), nil
	}
	if g := algo.ShardGateOf(ctx); g != nil {
		var ids []int
		for _, c := range checks {
			if id := shardOf(c); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		if err := g.AllowShards(ids); err != nil {
			return nil, fmt.Errorf("fake primary: %w", err)
		}
		if twice {
			if err := g.AllowShards(append(ids, ids...)); err != nil {
				return nil, fmt.Errorf("fake primary, second ask: %w", err)
			}
		}
	}
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil && slices.ContainsFunc(checks, func(c algo.Check) bool { return shardOf(c) == f.held }) {
		f.entered <- struct{}{}
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[int]int{}
	}
	var failed []int
	for _, c := range checks {
		s := shardOf(c)
		f.calls[s]++
		if f.dead[s] && !slices.Contains(failed, s) {
			failed = append(failed, s)
		}
	}
	if len(failed) > 0 {
		if f.plain {
			return nil, errRefused
		}
		return nil, &shardError{shards: failed, err: errRefused}
	}
	return admitAll(len(checks)), nil
}

// admitAll is the fake primary's answer: n admitted checks with 7 left.
func admitAll(n int) []algo.Decision {
	out := make([]algo.Decision, n)
	for i := range out {
		out[i] = algo.Decision{Allowed: true, Remaining: 7}
	}
	return out
}

func (f *shardFake) reached(shard int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[shard]
}

// TestShardBreakers: a dead shard opens its own breaker; requests on the
// other shards still reach the primary and succeed, requests that touch
// the dead shard get the failure mode without reaching the primary.
func TestShardBreakers(t *testing.T) {
	const failures = 3
	f := &shardFake{}
	f.setDead(2)
	b, reg := newTest(t, f, Options{Mode: ModeDeny, Routed: true, Breaker: BreakerOptions{Failures: failures, Cooldown: time.Hour}})
	ctx := context.Background()
	for i := range failures {
		d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(2)})
		if err != nil || d[0].Allowed {
			t.Fatalf("call %d on the dead shard: %+v, %v; want the deny mode's answer", i, d, err)
		}
		// The healthy shards keep answering in between.
		for _, s := range []int{1, 3} {
			if d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(s)}); err != nil || d[0].Remaining != 7 {
				t.Fatalf("shard %d beside failing shard 2: %+v, %v; want the primary's answer", s, d, err)
			}
		}
	}
	want := map[int]State{1: StateClosed, 2: StateOpen, 3: StateClosed}
	for s, st := range want {
		if got := b.ShardState(s); got != st {
			t.Errorf("shard %d: %v, want %v", s, got, st)
		}
	}
	if b.State() != StateOpen {
		t.Errorf("State() = %v, want open (the most severe shard's)", b.State())
	}

	reached := f.reached(2)
	const more = 20
	for i := range more {
		// Alone, and together with a healthy shard: both touch the open one.
		for _, checks := range [][]algo.Check{{onShard(2)}, {onShard(1), onShard(2)}} {
			if d, err := b.Apply(ctx, time.Now(), checks); err != nil || d[len(d)-1].Allowed {
				t.Fatalf("call %d on the open shard: %+v, %v; want the deny mode's answer", i, d, err)
			}
		}
		if d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(3), onShard(1)}); err != nil || d[0].Remaining != 7 {
			t.Fatalf("call %d on healthy shards: %+v, %v; want the primary's answer", i, d, err)
		}
	}
	if n := f.reached(2) - reached; n != 0 {
		t.Errorf("the open shard's checks reached the primary %d times", n)
	}
	if b.ShardState(1) != StateClosed || b.ShardState(3) != StateClosed {
		t.Errorf("healthy shards %v and %v, want closed", b.ShardState(1), b.ShardState(3))
	}
	// Shard 0 (made at start) and shards 1 and 3 closed, 2 open.
	wantMetrics := `
# HELP envoy_rls_backend_breaker_shards Backend shards (Redis Cluster masters; 1 for standalone Redis or Sentinel) whose circuit breaker is in each state.
# TYPE envoy_rls_backend_breaker_shards gauge
envoy_rls_backend_breaker_shards{state="closed"} 3
envoy_rls_backend_breaker_shards{state="half_open"} 0
envoy_rls_backend_breaker_shards{state="open"} 1
# HELP envoy_rls_backend_breaker_transitions_total Circuit breaker state changes of any backend shard, by the state entered (closed, half_open or open).
# TYPE envoy_rls_backend_breaker_transitions_total counter
envoy_rls_backend_breaker_transitions_total{state="closed"} 0
envoy_rls_backend_breaker_transitions_total{state="half_open"} 0
envoy_rls_backend_breaker_transitions_total{state="open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetrics),
		"envoy_rls_backend_breaker_shards", "envoy_rls_backend_breaker_transitions_total"); err != nil {
		t.Error(err)
	}
	if err := b.Ping(ctx); err != nil {
		t.Errorf("Ping with one shard of four open: %v, want nil (the others decide)", err)
	}
}

// TestShardBlame: an error naming its shards counts against those alone;
// one that does not (a primary that does not know its shards) counts
// against every shard of the request.
func TestShardBlame(t *testing.T) {
	for _, tc := range []struct {
		name string
		// plain: the primary's error names no shard.
		plain bool
		// open is whether shard 1, healthy but in every failed request,
		// opens too.
		open bool
	}{
		{name: "named", plain: false, open: false},
		{name: "plain", plain: true, open: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &shardFake{plain: tc.plain}
			f.setDead(2)
			b, _ := newTest(t, f, Options{Routed: true, Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour}})
			for range 2 {
				if _, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(1), onShard(2)}); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("got %v, want the primary's error", err)
				}
			}
			if b.ShardState(2) != StateOpen {
				t.Errorf("failed shard: %v, want open", b.ShardState(2))
			}
			if got := b.ShardState(1) == StateOpen; got != tc.open {
				t.Errorf("shard 1 open = %v, want %v", got, tc.open)
			}
		})
	}
}

// TestShardProbeReleased: a request that an open shard stops gives back
// the half-open probe it took on another shard, so that shard can still
// probe.
func TestShardProbeReleased(t *testing.T) {
	f := &shardFake{}
	f.setDead(1, 2)
	b, _ := newTest(t, f, Options{Mode: ModeAllow, Routed: true, Breaker: BreakerOptions{Failures: 1, Cooldown: 10 * time.Millisecond}})
	for _, s := range []int{1, 2} {
		_, _ = b.Apply(context.Background(), time.Now(), []algo.Check{onShard(s)})
	}
	// Half-open lasts until the probes answer.
	waitState(t, b, 1, StateHalfOpen)
	waitState(t, b, 2, StateHalfOpen)
	f.setDead()
	// Shard 2's one probe is in flight and held: shard 2 lets no other
	// request through until it answers.
	f.mu.Lock()
	f.held, f.entered, f.gate = 2, make(chan struct{}), make(chan struct{})
	f.mu.Unlock()
	probe := make(chan error, 1)
	go func() {
		_, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(2)})
		probe <- err
	}()
	<-f.entered
	// Shard 1 is asked first and lets the request through as its probe;
	// shard 2 then refuses it.
	before := f.reached(1)
	if d, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(1), onShard(2)}); err != nil || d[0].Remaining != 5 {
		t.Fatalf("request beside shard 2's probe: %+v, %v; want the allow mode's answer", d, err)
	}
	if f.reached(1) != before {
		t.Fatal("a request that shard 2 refused reached the primary")
	}
	// The probe slot was given back: a request on shard 1 alone probes it.
	if d, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(1)}); err != nil || d[0].Remaining != 7 {
		t.Fatalf("probe of shard 1: %+v, %v; want the primary's answer", d, err)
	}
	if b.ShardState(1) != StateClosed {
		t.Errorf("shard 1 after a successful probe: %v, want closed", b.ShardState(1))
	}
	close(f.gate)
	if err := <-probe; err != nil {
		t.Fatal(err)
	}
	if b.ShardState(2) != StateClosed {
		t.Errorf("shard 2 after a successful probe: %v, want closed", b.ShardState(2))
	}
}

// TestShardGateUnasked: a request the primary answers without asking the
// gate (a lease in hand, a known denial) is answered while the breaker of
// its checks' shard is open, and tells no breaker anything; a request that
// asks the gate for that shard gets the failure mode.
func TestShardGateUnasked(t *testing.T) {
	f := &shardFake{}
	f.setDead(2)
	b, _ := newTest(t, f, Options{Mode: ModeDeny, Routed: true, Breaker: BreakerOptions{Failures: 1, Cooldown: time.Hour}})
	ctx := context.Background()
	if d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(2)}); err != nil || d[0].Allowed {
		t.Fatalf("dead shard: %+v, %v; want the deny mode's answer", d, err)
	}
	if b.ShardState(2) != StateOpen {
		t.Fatalf("shard 2 after its failure: %v, want open", b.ShardState(2))
	}
	f.mu.Lock()
	f.local = map[int]bool{2: true}
	f.mu.Unlock()
	for i := range 3 {
		if d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(2), onShard(2)}); err != nil || d[0].Remaining != 7 {
			t.Fatalf("request %d answered without the gate: %+v, %v; want the primary's answer", i, d, err)
		}
		if d, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(1), onShard(2)}); err != nil || d[1].Allowed {
			t.Fatalf("request %d asking for shards 1 and 2: %+v, %v; want the deny mode's answer", i, d, err)
		}
	}
	if got := testutil.ToFloat64(b.errors.WithLabelValues(kindOpen)); got != 3 {
		t.Errorf("%v requests refused by the open breaker, want 3 (those that asked for it)", got)
	}
	if got := testutil.ToFloat64(b.failures.WithLabelValues(ModeDeny.String())); got != 4 {
		t.Errorf("%v requests answered with the failure mode, want 4", got)
	}
	if b.ShardState(2) != StateOpen || b.ShardState(1) != StateClosed {
		t.Errorf("shards 1 and 2: %v, %v; want closed, open", b.ShardState(1), b.ShardState(2))
	}
}

// TestShardGateOnce: each breaker is asked once per request, however often
// the primary names its shard: a half-open breaker with one probe lets the
// request through as that probe, and its success closes the breaker.
func TestShardGateOnce(t *testing.T) {
	f := &shardFake{}
	f.setDead(1, 2)
	b, _ := newTest(t, f, Options{Routed: true, Breaker: BreakerOptions{Failures: 1, Probes: 1, Cooldown: 10 * time.Millisecond}})
	ctx := context.Background()
	if _, err := b.Apply(ctx, time.Now(), []algo.Check{onShard(1), onShard(2)}); err == nil {
		t.Fatal("dead shards: no error")
	}
	waitState(t, b, 1, StateHalfOpen)
	waitState(t, b, 2, StateHalfOpen)
	f.setDead()
	f.mu.Lock()
	f.twice = true
	f.mu.Unlock()
	checks := []algo.Check{onShard(1), onShard(2), onShard(1), onShard(2)}
	if d, err := b.Apply(ctx, time.Now(), checks); err != nil || d[0].Remaining != 7 {
		t.Fatalf("probe of shards 1 and 2, asked twice: %+v, %v; want the primary's answer", d, err)
	}
	for _, id := range []int{1, 2} {
		if b.ShardState(id) != StateClosed {
			t.Errorf("shard %d after its probe succeeded: %v, want closed", id, b.ShardState(id))
		}
	}
}

// waitState waits until shard id's breaker is in state want. The breakers
// run on the wall clock; eventually's bound only stops a broken breaker
// from hanging the test.
func waitState(t *testing.T, b *Backend, id int, want State) {
	t.Helper()
	eventually.True(t, fmt.Sprintf("shard %d is %v", id, want), func() (bool, string) {
		got := b.ShardState(id)
		return got == want, got.String()
	})
}

// TestShardIdleLeavesState: a shard that gets no more requests (its slots
// moved to another master) drops out of State after idleCooldowns
// cool-downs instead of reporting its last state forever.
func TestShardIdleLeavesState(t *testing.T) {
	f := &shardFake{}
	f.setDead(2)
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	const cooldown = time.Hour
	b, _ := newTest(t, f, Options{Routed: true, Now: clock, Breaker: BreakerOptions{Failures: 1, Cooldown: cooldown}})
	_, _ = b.Apply(context.Background(), time.Now(), []algo.Check{onShard(2)})
	if b.State() != StateOpen {
		t.Fatalf("State() = %v, want open", b.State())
	}
	for range idleCooldowns {
		advance(cooldown)
		if _, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(1)}); err != nil {
			t.Fatal(err)
		}
	}
	advance(time.Second)
	if b.State() != StateClosed {
		t.Errorf("State() = %v after shard 2 was idle for %d cool-downs, want closed", b.State(), idleCooldowns)
	}
	if b.ShardState(2) != StateOpen {
		t.Errorf("ShardState(2) = %v, want open still (it is only left out)", b.ShardState(2))
	}
}

// TestShardOutOfRange: a primary asking the gate for a shard outside
// 0..MaxShards-1 is a programming error, reported as one, never a panic.
func TestShardOutOfRange(t *testing.T) {
	b, _ := newTest(t, &shardFake{}, Options{Routed: true})
	for _, n := range []int{-1, MaxShards} {
		_, err := b.Apply(context.Background(), time.Now(), []algo.Check{onShard(n)})
		if err == nil || !strings.Contains(err.Error(), "asked the shard gate for shard") {
			t.Errorf("shard %d: %v, want an error naming the shard gate", n, err)
		}
	}
}
