package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// TestMain shares one standalone server and one cluster across the tests.
func TestMain(m *testing.M) { redistest.Main(m) }

// deployment builds the next backend of one simulated replica: its own
// Redis client and redisalgo backend, as a separate process would have.
type deployment struct {
	name string
	// next returns a new replica's backend; callerTime makes Redis
	// evaluate at the time Apply is given.
	next func(t testing.TB, callerTime bool) Backend
}

func deployments() []deployment {
	return []deployment{
		{"standalone", replica(func(t testing.TB, o redisalgo.Options) (*redisalgo.Backend, error) {
			return redisalgo.New(redistest.SharedStandalone(t).Client(t), o)
		})},
		{"cluster", replica(func(t testing.TB, o redisalgo.Options) (*redisalgo.Backend, error) {
			return redisalgo.NewCluster(redistest.SharedCluster(t).ClusterClient(t), o)
		})},
		{"sentinel", replica(func(t testing.TB, o redisalgo.Options) (*redisalgo.Backend, error) {
			return redisalgo.New(redistest.SharedSentinel(t).FailoverClient(t), o)
		})},
	}
}

// replica is a deployment's next for one topology: open builds the
// backend on a fresh client of it, and the backend is closed at cleanup.
func replica(open func(testing.TB, redisalgo.Options) (*redisalgo.Backend, error)) func(testing.TB, bool) Backend {
	return func(t testing.TB, callerTime bool) Backend {
		t.Helper()
		b, err := open(t, redisalgo.Options{CallerTime: callerTime})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
}

func newLayer(t testing.TB, next Backend, opts Options) *Layer {
	t.Helper()
	l, err := New(next, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func leasedCheck(t testing.TB, p algo.Policy, value string) algo.Check {
	t.Helper()
	return algo.Check{
		Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "user", Value: value}},
		HashTag: -1, Policy: p, Hits: 1, Lease: true,
	}
}

// hammer runs callers goroutines on each layer, each applying c until
// deadline or perCaller attempts, and returns the admitted count, the
// attempts and the elapsed time from before the first call to after the
// last. The caller ends the layers' Run (returning their leases) after.
func hammer(t *testing.T, layers []*Layer, c algo.Check, callers, perCaller int, deadline time.Time) (admitted, attempts int64, elapsed time.Duration) {
	t.Helper()
	admitted, attempts, elapsed, _ = hammerWindows(t, layers, c, callers, perCaller, deadline)
	return admitted, attempts, elapsed
}

// hammerWindows is hammer that also counts each fixed window's admitted
// hits, by the end (Unix µs) of the window each admission reported: its
// reset after, from when it was answered, rounded to the nearest window
// end (the answer comes a little after the decision, whose clock is
// Redis's as tracked, off from this one by up to half a round trip).
func hammerWindows(t *testing.T, layers []*Layer, c algo.Check, callers, perCaller int, deadline time.Time) (admitted, attempts int64, elapsed time.Duration, perWindow map[int64]int64) {
	t.Helper()
	var wg sync.WaitGroup
	var adm, att, errs atomic.Int64
	var mu sync.Mutex
	perWindow = map[int64]int64{}
	period := c.Policy.Period
	start := time.Now()
	for _, l := range layers {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				checks := []algo.Check{c}
				for n := 0; n < perCaller && time.Now().Before(deadline); n++ {
					d, err := l.Apply(context.Background(), time.Now(), checks)
					att.Add(1)
					if err != nil {
						errs.Add(1)
						continue
					}
					if d[0].Allowed {
						adm.Add(1)
						if c.Policy.Algorithm == algo.FixedWindow {
							end := time.Now().UnixMicro() + d[0].ResetAfter
							end = (end + period/2) / period * period
							mu.Lock()
							perWindow[end]++
							mu.Unlock()
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed = time.Since(start)
	if n := errs.Load(); n > 0 {
		t.Fatalf("%d backend errors", n)
	}
	return adm.Load(), att.Load(), elapsed, perWindow
}

// TestHotKeyAccuracy is the accuracy test in-process: 4 replicas
// (lease layers, each with its own Redis client) × 64 callers on one key.
// Admitted hits must not exceed the algorithm's bound for the elapsed time
// (zero over-admission) and must reach 95% of it, and leases must have
// been granted and served decisions, so the lease path is what is tested.
// The load is bounded by a deadline and a per-caller count, on loopback.
func TestHotKeyAccuracy(t *testing.T) {
	const replicas, callers = 4, 64
	for _, dep := range deployments() {
		t.Run(dep.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				p    algo.Policy
			}{
				{"token_bucket", algo.Policy{Algorithm: algo.TokenBucket, Limit: 500, Period: algo.Second, Burst: 3000}},
				{"gcra", algo.Policy{Algorithm: algo.GCRA, Limit: 500, Period: algo.Second, Burst: 3000}},
				{"fixed_window", algo.Policy{Algorithm: algo.FixedWindow, Limit: 2000, Period: algo.Second}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					layers := make([]*Layer, replicas)
					stops := make([]func(), replicas)
					for i := range layers {
						layers[i] = newLayer(t, dep.next(t, false), Options{TTL: 100 * time.Millisecond, HotRPS: 50})
						stops[i] = backendtest.RunInBackground(t, layers[i].Run)
					}
					c := leasedCheck(t, tc.p, "hot")
					var bound, admitted, attempts int64
					if tc.p.Algorithm == algo.FixedWindow {
						// Run inside two whole windows, so that the bound
						// is two limits: start after a window starts and
						// stop before the second ends, each by 100 ms.
						// Each window must admit at most the limit: a
						// replica places windows on Redis's clock as it
						// tracks it (pkg/redisalgo's clock.go), and a
						// call begun just before the deadline may be
						// decided after it, so a loaded machine may put
						// a few admissions in a neighbouring window.
						now := time.Now().UnixMicro()
						next := now - now%tc.p.Period + tc.p.Period
						time.Sleep(time.Duration(next-now+100_000) * time.Microsecond)
						deadline := time.UnixMicro(next + 2*tc.p.Period - 100_000)
						var perWindow map[int64]int64
						admitted, attempts, _, perWindow = hammerWindows(t, layers, c, callers, 1000, deadline)
						for end, n := range perWindow {
							if n > tc.p.Limit {
								t.Errorf("window ending %d (%+dµs from the second's end): admitted %d > limit %d: over-admission", end, end-next-2*tc.p.Period, n, tc.p.Limit)
							}
							if end != next+tc.p.Period && end != next+2*tc.p.Period {
								t.Logf("%d admitted in the window ending %+dµs from the second's end", n, end-next-2*tc.p.Period)
								admitted -= n
							}
						}
						bound = 2 * tc.p.Limit
					} else {
						var elapsed time.Duration
						admitted, attempts, elapsed = hammer(t, layers, c, callers, 1000, time.Now().Add(1500*time.Millisecond))
						bound = tc.p.Burst + elapsed.Microseconds()*tc.p.Limit/tc.p.Period
					}
					for _, stop := range stops {
						stop() // returns the leases held
					}
					var st Stats
					for _, l := range layers {
						s := l.Stats()
						st.Granted += s.Granted
						st.Local += s.Local
						st.Returned += s.Returned
						st.Expired += s.Expired
					}
					t.Logf("admitted %d of bound %d (%.1f%%) in %d attempts; leases %+v", admitted, bound, 100*float64(admitted)/float64(bound), attempts, st)
					backendtest.CheckSaturatedBound(t, admitted, attempts, bound)
					if st.Granted == 0 || st.Local == 0 {
						t.Errorf("no lease served a decision (%+v): the lease path was not exercised", st)
					}
				})
			}
		})
	}
}

// fixture is one layer over Redis evaluating at injected times, with its
// sweeper clock under the test's control.
type fixture struct {
	l   *Layer
	now int64 // µs, the sweeper's clock
}

func newFixture(t *testing.T, next Backend) *fixture {
	t.Helper()
	f := &fixture{}
	f.l = newLayer(t, next, Options{
		TTL: 200 * time.Millisecond, HotRPS: 500, MaxFraction: 0.5, ReturnMargin: 100 * time.Millisecond,
		Now: func() time.Time { return time.UnixMicro(f.now) },
	})
	return f
}

func apply(t testing.TB, b interface {
	Apply(context.Context, time.Time, []algo.Check) ([]algo.Decision, error)
}, now int64, checks ...algo.Check) []algo.Decision {
	t.Helper()
	d, err := b.Apply(context.Background(), time.UnixMicro(now), checks)
	if err != nil || len(d) != len(checks) {
		t.Fatalf("Apply at %d: %v, %v", now, d, err)
	}
	return d
}

// warm sends HotRPS·TTL − 1 one-hit requests on c, 1µs apart from start:
// one short of hot. The next request, at the time warm returns, makes the
// counter hot and takes a lease.
func warm(t *testing.T, l *Layer, c algo.Check, start int64) int64 {
	t.Helper()
	n := int64(l.opts.HotRPS*l.opts.TTL.Seconds()) - 1
	for i := range n {
		apply(t, l, start+i, c)
	}
	if st := l.Stats(); st.Granted != 0 {
		t.Fatalf("leased while warming: %+v", st)
	}
	return start + n
}

// warmHits is how many hits warm sends with the fixture's options.
const warmHits = 99

func leftOf(t testing.TB, l *Layer, c algo.Check) int64 {
	t.Helper()
	key := c.AppendIdentity(nil)
	sh := l.shards.For(key)
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	if e := sh.M[string(key)]; e != nil {
		return e.left
	}
	return 0
}

// t0 is aligned to every period used here.
const t0 int64 = 1_700_006_400 * algo.Second

// TestLeaseLifecycle follows one counter on real Redis at injected times:
// it leases once hot, serves locally, keeps the all-or-nothing rule with a
// Redis-decided neighbour, returns unused hits at the TTL, and a
// fixed_window lease never outlives its window.
func TestLeaseLifecycle(t *testing.T) {
	for _, dep := range deployments() {
		t.Run(dep.name, func(t *testing.T) {
			t.Run("AllOrNothing", func(t *testing.T) {
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1000, Period: algo.Hour, Burst: 1000}
				hot := leasedCheck(t, p, "hot")
				at := warm(t, f.l, hot, t0+algo.Second)
				d := apply(t, f.l, at, hot) // takes the lease
				left := leftOf(t, f.l, hot)
				if f.l.Stats().Granted != 1 || left < 2 || !d[0].Allowed {
					t.Fatalf("no lease after warming: %+v, left %d, %+v", f.l.Stats(), left, d)
				}
				// A neighbour limit Redis denies: the leased hit must go
				// back into the lease.
				full := algo.Check{Domain: hot.Domain, Entries: []algo.Entry{{Key: "other", Value: "x"}}, HashTag: -1,
					Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Hour}, Hits: 1}
				apply(t, f.l, at, full)
				d = apply(t, f.l, at, hot, full)
				if d[1].Allowed {
					t.Fatalf("the full neighbour admitted: %+v", d)
				}
				if got := leftOf(t, f.l, hot); got != left {
					t.Fatalf("a denied request kept its leased hit: left %d, want %d", got, left)
				}
				// Under another limit (a reload, an override) the lease
				// does not serve: the request goes to Redis.
				lower := hot
				lower.Policy.Burst = 500
				apply(t, f.l, at, lower)
				if got := leftOf(t, f.l, hot); got != left {
					t.Fatalf("a lease granted under burst %d served burst %d: left %d, want %d", p.Burst, lower.Policy.Burst, got, left)
				}
				// Served locally: the lease shrinks, and the status never
				// shows more than the shared state held at the grant.
				d = apply(t, f.l, at, hot)
				if got := leftOf(t, f.l, hot); !d[0].Allowed || got != left-1 || d[0].Remaining > got {
					t.Fatalf("local decision %+v, left %d (want %d)", d, got, left-1)
				}
				// At the TTL the rest goes back: the shared bucket then
				// holds everything but the hits admitted.
				f.now = at + f.l.ttl
				f.l.Sweep(false)
				st := f.l.Stats()
				if st.Returned != uint64(left-1) || st.Expired != 0 {
					t.Fatalf("after the TTL: %+v, want %d returned", st, left-1)
				}
				exact := apply(t, dep.next(t, true), at, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p})
				// warm's hits, the take's own, the one under another
				// limit and the local one.
				if want := p.Burst - warmHits - 3; exact[0].Remaining != want {
					t.Fatalf("shared remaining %d after the return, want %d", exact[0].Remaining, want)
				}
			})
			t.Run("RunReturnsAllAtItsEnd", func(t *testing.T) {
				// At shutdown the end of Run returns a lease that has
				// not reached its TTL (the clock stands still here).
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1000, Period: algo.Hour, Burst: 1000}
				hot := leasedCheck(t, p, "shutdown")
				at := warm(t, f.l, hot, t0+algo.Second)
				apply(t, f.l, at, hot) // takes the lease
				left := leftOf(t, f.l, hot)
				if left < 2 {
					t.Fatalf("no lease after warming: %+v, left %d", f.l.Stats(), left)
				}
				backendtest.RunInBackground(t, f.l.Run)()
				if st := f.l.Stats(); st.Returned != uint64(left) || leftOf(t, f.l, hot) != 0 {
					t.Fatalf("after Run ended: %+v, want %d returned", st, left)
				}
			})
			t.Run("RenewsBeforeTheSweep", func(t *testing.T) {
				// A lease past its TTL with hits left must not keep the
				// counter from leasing again until the sweeper runs: the
				// next request takes a new lease, and the sweep returns
				// the old one's hits.
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1000, Period: algo.Hour, Burst: 1000}
				hot := leasedCheck(t, p, "renew")
				at := warm(t, f.l, hot, t0+algo.Second)
				// The take, then a few local hits, which keep the counter
				// hot over the TTL.
				for range 5 {
					apply(t, f.l, at, hot)
				}
				old := leftOf(t, f.l, hot)
				if f.l.Stats().Granted != 1 || old < 2 {
					t.Fatalf("no lease: %+v, left %d", f.l.Stats(), old)
				}
				at += f.l.ttl
				if d := apply(t, f.l, at, hot); !d[0].Allowed || f.l.Stats().Granted != 2 {
					t.Fatalf("at the TTL, before a sweep: %+v, %+v; want a second lease", d, f.l.Stats())
				}
				f.now = at
				f.l.Sweep(false)
				if st := f.l.Stats(); st.Returned != uint64(old) || st.Expired != 0 {
					t.Fatalf("after the sweep: %+v, want the first lease's %d hits returned", st, old)
				}
				exact := apply(t, dep.next(t, true), at, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p})
				// warm's hits, the first take's own, the 4 local ones, the
				// second take's own, and the second lease.
				if want := p.Burst - warmHits - 6 - leftOf(t, f.l, hot); exact[0].Remaining != want {
					t.Fatalf("shared remaining %d, want %d", exact[0].Remaining, want)
				}
			})
			t.Run("TakeWithDeniedNeighbour", func(t *testing.T) {
				// The request that takes the lease is denied by another
				// limit: the take must leave the shared state as it was
				// (on Cluster, the take's slot group is refunded exactly
				// what it was granted).
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Hour, Burst: 1000}
				hot := leasedCheck(t, p, "take")
				full := algo.Check{Domain: hot.Domain, Entries: []algo.Entry{{Key: "other", Value: "y"}}, HashTag: -1,
					Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Hour}, Hits: 1}
				at := warm(t, f.l, hot, t0+algo.Second)
				apply(t, f.l, at, full)
				// Another replica leaves 10 tokens, so the take (sized by
				// the remaining this layer last saw) gets fewer than it
				// asks for.
				other := dep.next(t, true)
				drain := algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p, Hits: p.Burst - warmHits - 10}
				if d := apply(t, other, at, drain); !d[0].Allowed {
					t.Fatalf("drain: %+v", d)
				}
				if d := apply(t, f.l, at, hot, full); d[0].Allowed && d[1].Allowed {
					t.Fatalf("admitted past the full neighbour: %+v", d)
				}
				if st := f.l.Stats(); st.Granted != 0 || leftOf(t, f.l, hot) != 0 {
					t.Fatalf("a denied request left a lease: %+v, left %d", st, leftOf(t, f.l, hot))
				}
				exact := apply(t, dep.next(t, true), at, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p})
				if want := int64(10); exact[0].Remaining != want {
					t.Fatalf("shared remaining %d after a denied take, want %d", exact[0].Remaining, want)
				}
			})
			t.Run("FixedWindowEnds", func(t *testing.T) {
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.FixedWindow, Limit: 10_000, Period: algo.Second}
				hot := leasedCheck(t, p, "fw")
				// Warm and lease 260ms before the window ends: the TTL
				// (200ms) ends within the last ReturnMargin (100ms).
				end := t0 + algo.Second
				at := warm(t, f.l, hot, end-260_000)
				apply(t, f.l, at, hot)
				left := leftOf(t, f.l, hot)
				if f.l.Stats().Granted != 1 || left < 2 {
					t.Fatalf("no lease: %+v, left %d", f.l.Stats(), left)
				}
				// Too late to return it, it stays spendable in its window.
				f.now = at + f.l.ttl
				f.l.Sweep(false)
				if st := f.l.Stats(); st.Expired != 0 || st.Returned != 0 || leftOf(t, f.l, hot) != left {
					t.Fatalf("at the TTL, %dµs before the window ends: %+v, left %d; want the lease kept", end-f.now, st, leftOf(t, f.l, hot))
				}
				apply(t, f.l, end-10_000, hot)
				if left--; leftOf(t, f.l, hot) != left {
					t.Fatalf("10ms before the window ends the lease was not spent: left %d, want %d", leftOf(t, f.l, hot), left)
				}
				// In the next window the lease must not be spent: the
				// request goes to Redis and counts in the new window.
				d := apply(t, f.l, end, hot)
				if got := leftOf(t, f.l, hot); got != left || d[0].Remaining != p.Limit-1 {
					t.Fatalf("spent a past window's lease: left %d (want %d), %+v", got, left, d)
				}
				// Past its window the hits cannot be returned safely:
				// they are dropped and counted as expired.
				f.now = end
				f.l.Sweep(false)
				if st := f.l.Stats(); st.Expired != uint64(left) || st.Returned != 0 {
					t.Fatalf("after the window: %+v, want %d expired", st, left)
				}
				if d := apply(t, dep.next(t, true), end, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p}); d[0].Remaining != p.Limit-1 {
					t.Fatalf("the new window holds %d, want %d: a lease was refunded into it", d[0].Remaining, p.Limit-1)
				}
			})
			t.Run("FixedWindowReturnMargin", func(t *testing.T) {
				// With the default ReturnMargin (1 s), a fixed_window
				// lease ending with a second or more of its window left
				// is returned; one ending later is kept to its window's
				// end and then expires, so the next window is never
				// refunded (which would let it admit more than its limit).
				for _, tt := range []struct {
					name     string
					before   int64 // µs between the lease's grant and the window's end
					returned bool
				}{
					{"1.5s left at the grant", 1_500_000, true},
					{"1.1s left at the grant", 1_100_000, false},
				} {
					t.Run(tt.name, func(t *testing.T) {
						var now int64
						l := newLayer(t, dep.next(t, true), Options{
							TTL: 200 * time.Millisecond, HotRPS: 500, MaxFraction: 0.5,
							Now: func() time.Time { return time.UnixMicro(now) },
						})
						p := algo.Policy{Algorithm: algo.FixedWindow, Limit: 10_000, Period: algo.Minute}
						hot := leasedCheck(t, p, "margin")
						end := t0 + algo.Minute
						at := warm(t, l, hot, end-tt.before-warmHits)
						apply(t, l, at, hot)
						left := leftOf(t, l, hot)
						if l.Stats().Granted != 1 || left < 2 {
							t.Fatalf("no lease: %+v, left %d", l.Stats(), left)
						}
						now = at + l.ttl
						l.Sweep(false)
						if got := l.Stats().Returned == uint64(left); got != tt.returned {
							t.Fatalf("at the TTL, %dµs before the window ends: %+v; want returned %v", end-now, l.Stats(), tt.returned)
						}
						if tt.returned {
							return
						}
						// The next window holds one hit; the late lease
						// must expire rather than be refunded into it.
						other := dep.next(t, true)
						apply(t, other, end, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p, Hits: 1})
						now = end
						l.Sweep(false)
						if st := l.Stats(); st.Expired != uint64(left) || st.Returned != 0 {
							t.Fatalf("after the window: %+v, want %d expired", st, left)
						}
						if d := apply(t, other, end, algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p}); d[0].Remaining != p.Limit-1 {
							t.Fatalf("the next window holds %d, want %d: the late lease was refunded into it", d[0].Remaining, p.Limit-1)
						}
					})
				}
			})
			t.Run("ColdNeverLeases", func(t *testing.T) {
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1000, Period: algo.Hour, Burst: 1000}
				// 100 distinct keys, one hit each, and one key at 5 rps
				// (below HotRPS 500): none may lease.
				for i := range 100 {
					apply(t, f.l, t0+int64(i)*1000, leasedCheck(t, p, fmt.Sprint("k", i)))
				}
				slow := leasedCheck(t, p, "slow")
				for i := range 10 {
					apply(t, f.l, t0+int64(i)*200_000, slow)
				}
				if st := f.l.Stats(); st.Granted != 0 {
					t.Fatalf("cold keys leased: %+v", st)
				}
			})
			t.Run("KilledReplicaLosesAtMostItsLease", func(t *testing.T) {
				f := newFixture(t, dep.next(t, true))
				p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Hour, Burst: 1000}
				hot := leasedCheck(t, p, "killed")
				at := warm(t, f.l, hot, t0+algo.Second)
				apply(t, f.l, at, hot)
				left := leftOf(t, f.l, hot)
				if left < 2 {
					t.Fatalf("no lease, left %d", left)
				}
				// The replica dies: no Close, no return. Another replica
				// can still get everything else, exactly.
				other := dep.next(t, true)
				c := algo.Check{Domain: hot.Domain, Entries: hot.Entries, HashTag: -1, Policy: p, Hits: 1}
				var admitted int64
				for range p.Burst {
					if apply(t, other, at, c)[0].Allowed {
						admitted++
					}
				}
				if want := p.Burst - warmHits - 1 - left; admitted != want {
					t.Fatalf("the other replica admitted %d, want %d (burst − %d used − the dead lease of %d)", admitted, want, warmHits+1, left)
				}
			})
		})
	}
}

// leasedLayer returns a layer over standalone Redis at injected time whose
// counter c holds a lease of about 1000 hits at the returned time.
func leasedLayer(t testing.TB) (*Layer, algo.Check, int64) {
	t.Helper()
	l := newLayer(t, deployments()[0].next(t, true), Options{TTL: time.Second, HotRPS: 1000, MaxFraction: 0.5})
	c := leasedCheck(t, algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Hour, Burst: 100_000}, "bench")
	at := t0
	for range 1000 {
		apply(t, l, at, c)
	}
	if left := leftOf(t, l, c); left < 900 {
		t.Fatalf("lease of %d hits, want about 1000", left)
	}
	return l, c, at
}

// TestLeaseHitAllocs: a decision answered from a lease allocates only the
// decisions slice that the Backend contract returns.
func TestLeaseHitAllocs(t *testing.T) {
	l, c, at := leasedLayer(t)
	checks := []algo.Check{c}
	now := time.UnixMicro(at)
	allocs := testing.AllocsPerRun(500, func() {
		if d, err := l.Apply(context.Background(), now, checks); err != nil || !d[0].Allowed {
			t.Fatalf("leased hit: %v %v", d, err)
		}
	})
	if allocs > 1 && !raceEnabled {
		t.Fatalf("a leased hit allocates %.1f times, want 1 (the decisions)", allocs)
	}
	if st := l.Stats(); st.Local < 500 {
		t.Fatalf("only %d local decisions: the runs did not hit the lease", st.Local)
	}
}

// BenchmarkLeaseHit measures a decision answered from a lease: no Redis
// call, and one allocation (the decisions the Backend contract returns).
func BenchmarkLeaseHit(b *testing.B) {
	l, c, at := leasedLayer(b)
	checks := []algo.Check{c}
	now := time.UnixMicro(at)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%500 == 0 {
			b.StopTimer()
			// Keep the lease full without a Redis call.
			key := c.AppendIdentity(nil)
			sh := l.shards.For(key)
			sh.Mu.Lock()
			sh.M[string(key)].left = 1000
			sh.Mu.Unlock()
			b.StartTimer()
		}
		if d, err := l.Apply(context.Background(), now, checks); err != nil || !d[0].Allowed {
			b.Fatalf("leased hit: %v %v", d, err)
		}
	}
}
