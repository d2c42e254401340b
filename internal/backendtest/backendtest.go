// Package backendtest holds the behaviour every rate-limit backend must
// show, as one suite run against each of them (the in-process store and
// Redis in its deployments). It drives a backend only through Apply with an
// injected clock; it must not reach into any backend's storage.
package backendtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Backend is what the suite drives: the backend layer contract,
// algo.Applier, which the suite checks.
type Backend = algo.Applier

// Factory returns a backend that decides at the now each Apply is given
// (for Redis: evaluates at it instead of the server's TIME). Scenarios use
// their test's name as the domain, so backends that share one store across
// calls (a Redis server) keep scenarios apart.
type Factory func(t *testing.T) Backend

// Start is an epoch aligned to every window the suite uses. Scenarios
// whose clock does not move decide at Start throughout.
const Start int64 = 1_700_006_400 * algo.Second

// Run runs every scenario against backends made by f.
func Run(t *testing.T, f Factory) {
	t.Run("BurstDenyRecover", func(t *testing.T) { burstDenyRecover(t, f) })
	t.Run("AllOrNothing", func(t *testing.T) { allOrNothing(t, f) })
	t.Run("CheckOnlyAndRefund", func(t *testing.T) { checkOnlyAndRefund(t, f) })
	t.Run("Charges", func(t *testing.T) { charges(t, f) })
	t.Run("DistinctCounters", func(t *testing.T) { distinctCounters(t, f) })
	t.Run("SharedCounter", func(t *testing.T) { sharedCounter(t, f) })
	t.Run("ConcurrentExact", func(t *testing.T) { concurrentExact(t, f) })
	t.Run("SubWindows", func(t *testing.T) { subWindows(t, f) })
}

func check(domain string, pol algo.Policy, hits int64, kv ...string) algo.Check {
	c := algo.Check{Domain: domain, HashTag: -1, Policy: pol, Hits: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Entries = append(c.Entries, algo.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return c
}

// Apply applies checks on b at now (Unix µs), failing tb on an error or a
// decision count other than one per check. The backends' own tests use it
// too.
func Apply(tb testing.TB, b Backend, now int64, checks ...algo.Check) []algo.Decision {
	tb.Helper()
	d, err := b.Apply(context.Background(), time.UnixMicro(now), checks)
	if err != nil {
		tb.Fatalf("Apply: %v", err)
	}
	if len(d) != len(checks) {
		tb.Fatalf("Apply returned %d decisions for %d checks", len(d), len(checks))
	}
	return d
}

// CheckSaturatedBound checks the outcome of a load that several replicas
// sent through one limit: attempts at least twice bound (else the load never
// reached the limit and the counts say nothing), admitted at most bound (more
// is over-admission) and at least 95% of it (leases and refunds may
// under-admit only a little). The lease layer's tests and the end-to-end
// lease test share it, so both hold the same bound.
func CheckSaturatedBound(tb testing.TB, admitted, attempts, bound int64) {
	tb.Helper()
	if attempts < 2*bound {
		tb.Fatalf("only %d attempts for a bound of %d: the load did not saturate the limit, so the test says nothing", attempts, bound)
	}
	if admitted > bound {
		tb.Errorf("admitted %d > bound %d: over-admission", admitted, bound)
	}
	if admitted*100 < bound*95 {
		tb.Errorf("admitted %d < 95%% of bound %d", admitted, bound)
	}
}

// UserCheck is a check of hits on the counter (user, user) of domain.
func UserCheck(domain, user string, pol algo.Policy, hits int64) algo.Check {
	return check(domain, pol, hits, "user", user)
}

// PerMinute is a policy of n per minute.
func PerMinute(a algo.Algorithm, n int64) algo.Policy {
	return algo.Policy{Algorithm: a, Limit: n, Period: algo.Minute}
}

func expect(t *testing.T, got algo.Decision, allowed bool, remaining int64) {
	t.Helper()
	if got.Allowed != allowed || got.Remaining != remaining {
		t.Fatalf("decision %+v, want allowed=%v remaining=%d", got, allowed, remaining)
	}
}

// burstDenyRecover: limit hits pass, the next is denied, and RetryAfter is
// exact: 1µs earlier still denied, at RetryAfter admitted. A limit of 3 per
// second makes the emission interval a fraction of a microsecond.
func burstDenyRecover(t *testing.T, f Factory) {
	for _, a := range algo.Algorithms {
		for _, limit := range []int64{3, 4} {
			t.Run(fmt.Sprintf("%s/%d", a, limit), func(t *testing.T) { burstDenyRecoverOne(t, f, a, limit) })
		}
	}
}

func burstDenyRecoverOne(t *testing.T, f Factory, a algo.Algorithm, limit int64) {
	var now atomic.Int64
	now.Store(Start)
	b := f(t)
	c := check(t.Name(), algo.Policy{Algorithm: a, Limit: limit, Period: algo.Second}, 1, "k", "v")
	for i := range limit {
		expect(t, Apply(t, b, now.Load(), c)[0], true, limit-1-i)
	}
	d := Apply(t, b, now.Load(), c)[0]
	expect(t, d, false, 0)
	if d.RetryAfter <= 0 || d.RetryAfter > 2*algo.Second {
		t.Fatalf("RetryAfter %d µs out of (0, 2s]", d.RetryAfter)
	}
	if d.ResetAfter < d.RetryAfter && a != algo.SlidingWindow || d.ResetAfter <= 0 || d.ResetAfter > 2*algo.Second {
		t.Fatalf("ResetAfter %d µs out of [RetryAfter %d, 2s]", d.ResetAfter, d.RetryAfter)
	}
	now.Add(d.RetryAfter - 1)
	if Apply(t, b, now.Load(), c)[0].Allowed {
		t.Fatalf("admitted 1µs before RetryAfter (%d µs)", d.RetryAfter)
	}
	now.Add(1)
	if !Apply(t, b, now.Load(), c)[0].Allowed {
		t.Fatalf("denied at RetryAfter (%d µs)", d.RetryAfter)
	}
}

// allOrNothing: when the second limit denies, the first consumes nothing.
func allOrNothing(t *testing.T, f Factory) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			b := f(t)
			wide := check(t.Name(), algo.Policy{Algorithm: a, Limit: 10, Period: algo.Minute}, 1, "user", "u")
			narrow := check(t.Name(), algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Minute}, 1, "path", "/x")
			ds := Apply(t, b, Start, wide, narrow)
			expect(t, ds[0], true, 9)
			expect(t, ds[1], true, 0)
			ds = Apply(t, b, Start, wide, narrow)
			expect(t, ds[1], false, 0)
			expect(t, ds[0], true, 9) // reported as a check: nothing consumed
			expect(t, Apply(t, b, Start, wide)[0], true, 8)
		})
	}
}

func checkOnlyAndRefund(t *testing.T, f Factory) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			b := f(t)
			pol := algo.Policy{Algorithm: a, Limit: 5, Period: algo.Minute}
			expect(t, Apply(t, b, Start, check(t.Name(), pol, 3, "k", "v"))[0], true, 2)
			expect(t, Apply(t, b, Start, check(t.Name(), pol, 0, "k", "v"))[0], true, 2)
			refund := check(t.Name(), pol, 2, "k", "v")
			refund.Refund = true
			expect(t, Apply(t, b, Start, refund)[0], true, 4)
			expect(t, Apply(t, b, Start, check(t.Name(), pol, 4, "k", "v"))[0], true, 0)
			expect(t, Apply(t, b, Start, check(t.Name(), pol, 1, "k", "v"))[0], false, 0)
		})
	}
}

// charges: a charge (algo.Check.Charge) is counted whole even past its
// limit and whatever the request's other checks decide (on a Redis
// Cluster, another slot group's denial refunds no charge); the overdraft
// shows as a negative Remaining and denies check-only requests; the
// request's other checks consume nothing when it is denied.
func charges(t *testing.T, f Factory) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			b := f(t)
			pol := algo.Policy{Algorithm: a, Limit: 10, Period: algo.Minute}
			budget := func(hits int64) algo.Check {
				c := check(t.Name(), pol, hits, "budget", "b")
				c.Charge = hits > 0
				return c
			}
			other := check(t.Name(), algo.Policy{Algorithm: algo.FixedWindow, Limit: 100, Period: algo.Minute}, 1, "other", "o")
			block := check(t.Name(), algo.Policy{Algorithm: algo.FixedWindow, Limit: 0, Period: algo.Minute}, 1, "block", "x")
			// A charge that fits, beside a denying limit (on a Cluster
			// in another slot group): counted all the same.
			ds := Apply(t, b, Start, budget(2), block)
			expect(t, ds[0], true, 8)
			expect(t, ds[1], false, 0)
			expect(t, Apply(t, b, Start, budget(6))[0], true, 2)
			// Past the limit: counted, denied, and the request's other
			// check consumes nothing.
			ds = Apply(t, b, Start, budget(9), other)
			expect(t, ds[0], false, -7)
			overdrawn(t, Apply(t, b, Start, budget(0))[0])
			expect(t, Apply(t, b, Start, other)[0], true, 99)
			// A charge beside a denying limit is counted all the same.
			expect(t, Apply(t, b, Start, budget(1), block)[0], false, -8)
			overdrawn(t, Apply(t, b, Start, budget(0))[0])
			// 18 counted: a refund of 8 leaves the budget spent, not
			// free (it would be, had a charge been lost).
			refund := check(t.Name(), pol, 8, "budget", "b")
			refund.Refund = true
			expect(t, Apply(t, b, Start, refund)[0], true, 0)
			expect(t, Apply(t, b, Start, budget(0))[0], false, 0)
		})
	}
}

// overdrawn checks a check-only decision on an overdrawn limit: denied,
// with nothing left (a deny cache in front reports 0 rather than the
// overdraft, which only the store knows).
func overdrawn(t *testing.T, d algo.Decision) {
	t.Helper()
	if d.Allowed || d.Remaining > 0 {
		t.Errorf("check-only on an overdrawn limit: %+v, want denied with nothing left", d)
	}
}

// distinctCounters: descriptors that envoyproxy/ratelimit's "_"-joined keys
// would merge keep separate counters here.
func distinctCounters(t *testing.T, f Factory) {
	b := f(t)
	pol := algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Minute}
	d := t.Name() + "/d"
	variants := []algo.Check{
		check(d, pol, 1, "a", "b_c_d"),
		check(d, pol, 1, "a", "b", "c", "d"),
		check(d+"_a", pol, 1, "b", "c_d"),
		check(d, pol, 1, "a", "b}{c"),
		check(d, pol, 1, "a", "b:c"),
		check(d, pol, 1, "a:b", "c"),
		check(d, algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Hour}, 1, "a", "b_c_d"),
		check(d, algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1, Period: algo.Minute}, 1, "a", "b_c_d"),
	}
	for i, c := range variants {
		if !Apply(t, b, Start, c)[0].Allowed {
			t.Fatalf("variant %d (%+v) shares a counter with an earlier one", i, c)
		}
	}
}

// sharedCounter: one request that carries the same descriptor twice (Envoy
// sends one from the route and one from the virtual host, or a client adds
// a limit override of the rule's period) names one counter twice. Both
// checks must count: a limit of 5 admits at most 5 hits however the request
// repeats the descriptor, and the repeats report one decision.
func sharedCounter(t *testing.T, f Factory) {
	cases := []struct {
		name          string
		first, second int64 // the limits of the two copies
		wantLimit     int64 // the limit the merged checks obey
	}{
		{name: "same limit", first: 5, second: 5, wantLimit: 5},
		{name: "override lowers", first: 10, second: 5, wantLimit: 5},
		{name: "override raises", first: 5, second: 10, wantLimit: 5},
	}
	for _, a := range algo.Algorithms {
		for _, tc := range cases {
			t.Run(a.String()+"/"+tc.name, func(t *testing.T) {
				b := f(t)
				first := check(t.Name(), algo.Policy{Algorithm: a, Limit: tc.first, Period: algo.Minute}, 1, "user", "a")
				second := check(t.Name(), algo.Policy{Algorithm: a, Limit: tc.second, Period: algo.Minute}, 1, "user", "a")
				admitted := int64(0)
				for range 2 * tc.wantLimit {
					ds := Apply(t, b, Start, first, second)
					if ds[0] != ds[1] {
						t.Fatalf("one counter, two decisions: %+v and %+v", ds[0], ds[1])
					}
					if ds[0].Allowed {
						admitted += 2
					}
				}
				// Requests of 2 hits: the most that fits is the limit rounded
				// down to even.
				if want := tc.wantLimit / 2 * 2; admitted != want {
					t.Fatalf("%d hits admitted through a limit of %d, want %d", admitted, tc.wantLimit, want)
				}
				// A check-only probe under the limit obeyed sees every hit.
				probe := check(t.Name(), algo.Policy{Algorithm: a, Limit: tc.wantLimit, Period: algo.Minute}, 0, "user", "a")
				if d := Apply(t, b, Start, probe)[0]; d.Remaining != tc.wantLimit-admitted {
					t.Fatalf("after %d admitted hits the counter reports remaining %d, want %d", admitted, d.Remaining, tc.wantLimit-admitted)
				}
			})
		}
	}
}

// concurrentExact: many concurrent single-hit requests on one limit admit
// exactly the limit (the clock does not move).
func concurrentExact(t *testing.T, f Factory) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			b := f(t)
			const limit, workers, each = 50, 8, 20
			c := check(t.Name(), algo.Policy{Algorithm: a, Limit: limit, Period: algo.Hour}, 1, "k", "v")
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						d, err := b.Apply(context.Background(), time.UnixMicro(Start), []algo.Check{c})
						if err != nil {
							errs <- err
							return
						}
						if d[0].Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Apply: %v", err)
			}
			if got := admitted.Load(); got != limit {
				t.Fatalf("admitted %d of %d concurrent requests, want exactly %d", got, workers*each, limit)
			}
		})
	}
}

// RunInBackground runs a backend's lifecycle (its Run) on a goroutine, as
// the service does. The returned stop cancels it and waits for it to
// return, failing t if it returned an error; stop runs at the test's end
// too, if not called before, and again is a no-op.
func RunInBackground(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}
