package denycache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// counting is a Backend that counts the calls reaching the backend it wraps.
type counting struct {
	next  Backend
	calls atomic.Int64
}

func (c *counting) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	c.calls.Add(1)
	return c.next.Apply(ctx, now, checks)
}

func newCache(t testing.TB, next Backend, opts Options) *Cache {
	t.Helper()
	c, err := New(next, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// newCounted puts a cache with opts in front of next, and counts the calls
// that get through it to next.
func newCounted(t testing.TB, next Backend, opts Options) (*Cache, *counting) {
	t.Helper()
	cnt := &counting{next: next}
	return newCache(t, cnt, opts), cnt
}

// backends makes the wrapped backends the tests run on: the in-process
// store and a standalone Redis, both on the injected clock. Each call on
// Redis gets a fresh domain, so the two backends of one test never share
// counters.
var backends = []struct {
	name string
	make func(t *testing.T) (Backend, string)
}{
	{"memstore", func(t *testing.T) (Backend, string) {
		return newStore(t), t.Name()
	}},
	{"redis", func(t *testing.T) (Backend, string) {
		return newRedis(t, redistest.SharedStandalone(t).Client(t)), redistest.KeyPrefix(t)
	}},
}

// newRedis returns a Redis backend that evaluates at the caller's now.
func newRedis(t *testing.T, client redis.UniversalClient) Backend {
	t.Helper()
	b, err := redisalgo.New(client, redisalgo.Options{CallerTime: true})
	if err != nil {
		t.Fatalf("redisalgo.New: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestBackendSuite: the cache in front of each backend behaves as a
// backend.
func TestBackendSuite(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backendtest.Backend {
				next, prefix := bk.make(t)
				// The suite names counters after its tests; a fresh prefix
				// keeps repeated runs (-count) apart on the shared Redis.
				return newCache(t, prefixed{next, prefix}, Options{})
			})
		})
	}
}

// prefixed puts prefix before every check's domain.
type prefixed struct {
	next   Backend
	prefix string
}

func (p prefixed) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	own := make([]algo.Check, len(checks))
	for i, c := range checks {
		c.Domain = p.prefix + c.Domain
		own[i] = c
	}
	return p.next.Apply(ctx, now, own)
}

// TestShortCircuit: once the backend denies, the same request is denied
// without a backend call until the announced time, and then goes to the
// backend again.
func TestShortCircuit(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			for _, a := range algo.Algorithms {
				t.Run(a.String(), func(t *testing.T) {
					now := backendtest.Start
					next, dom := bk.make(t)
					c, cnt := newCounted(t, next, Options{Registerer: prometheus.NewRegistry()})
					ch := backendtest.UserCheck(dom, "alice", backendtest.PerMinute(a, 2), 1)
					backendtest.Apply(t, c, now, ch)
					backendtest.Apply(t, c, now, ch)
					first := backendtest.Apply(t, c, now, ch)[0]
					if first.Allowed || first.RetryAfter <= 0 {
						t.Fatalf("third request: %+v, want denied by the backend", first)
					}
					if got := cnt.calls.Load(); got != 3 {
						t.Fatalf("%d backend calls for 3 requests, want 3", got)
					}
					for _, step := range []int64{0, 1, first.RetryAfter/2 - 1, first.RetryAfter/2 - 1} {
						now += step
						d := backendtest.Apply(t, c, now, ch)[0]
						elapsed := now - backendtest.Start
						if d.Allowed || d.Remaining != 0 || d.RetryAfter != first.RetryAfter-elapsed {
							t.Fatalf("at +%dµs: %+v, want denied with RetryAfter %d", elapsed, d, first.RetryAfter-elapsed)
						}
					}
					if got := cnt.calls.Load(); got != 3 {
						t.Errorf("%d backend calls, want 3: the cached denials must not reach the backend", got)
					}
					now = backendtest.Start + first.RetryAfter
					if d := backendtest.Apply(t, c, now, ch)[0]; !d.Allowed {
						t.Errorf("at RetryAfter: %+v, want admitted by the backend", d)
					}
					if got := cnt.calls.Load(); got != 4 {
						t.Errorf("%d backend calls, want 4", got)
					}
					hits, misses, _ := c.Stats()
					if hits != 4 || misses != 4 {
						t.Errorf("stats: %d hits, %d misses; want 4, 4", hits, misses)
					}
					if got := testutil.ToFloat64(c.hitC); got != 4 {
						t.Errorf("hit metric = %v, want 4", got)
					}
				})
			}
		})
	}
}

// TestCachedAnswer: a cached denial reports the other checks of the
// request as untouched counters, and a smaller request on the same
// counter still goes to the backend.
func TestCachedAnswer(t *testing.T) {
	c, cnt := newCounted(t, newStore(t), Options{})
	bucket := algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: algo.Minute, Burst: 20}
	narrow := backendtest.UserCheck(t.Name(), "narrow", bucket, 15)
	wide := backendtest.UserCheck(t.Name(), "wide", backendtest.PerMinute(algo.SlidingWindow, 100), 1)
	backendtest.Apply(t, c, backendtest.Start, narrow, wide) // 5 tokens left
	d := backendtest.Apply(t, c, backendtest.Start, narrow, wide)
	if d[0].Allowed {
		t.Fatalf("second 15-hit request: %+v, want denied", d[0])
	}
	calls := cnt.calls.Load()
	d = backendtest.Apply(t, c, backendtest.Start, narrow, wide)
	if cnt.calls.Load() != calls {
		t.Fatal("the known denial reached the backend")
	}
	if d[0].Allowed || d[0].Remaining != 0 {
		t.Errorf("cached check: %+v, want denied with 0 left", d[0])
	}
	if want := (algo.Decision{Allowed: true, Remaining: 100}); d[1] != want {
		t.Errorf("other check: %+v, want %+v (an untouched counter)", d[1], want)
	}
	// Fewer hits than the known denial: the backend decides, and admits.
	small := narrow
	small.Hits = 5
	if d := backendtest.Apply(t, c, backendtest.Start, small, wide); !d[0].Allowed || d[0].Remaining != 0 {
		t.Errorf("5-hit request: %+v, want admitted with 0 left", d[0])
	}
	if cnt.calls.Load() != calls+1 {
		t.Error("a request below the known denial did not reach the backend")
	}
	// A check-only request below it too.
	probe := narrow
	probe.Hits = 0
	backendtest.Apply(t, c, backendtest.Start, probe)
	if cnt.calls.Load() != calls+2 {
		t.Error("a check-only request did not reach the backend")
	}
}

// TestRefundEvicts: a refund goes to the backend and forgets the denial,
// so the next request is decided by the backend and admitted.
func TestRefundEvicts(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			next, dom := bk.make(t)
			c, cnt := newCounted(t, next, Options{})
			ch := backendtest.UserCheck(dom, "u", backendtest.PerMinute(algo.FixedWindow, 1), 1)
			backendtest.Apply(t, c, backendtest.Start, ch)
			backendtest.Apply(t, c, backendtest.Start, ch) // denied, remembered
			if c.Len() != 1 {
				t.Fatalf("Len = %d after a denial, want 1", c.Len())
			}
			back := ch
			back.Refund = true
			other := backendtest.UserCheck(dom, "other", backendtest.PerMinute(algo.FixedWindow, 5), 1)
			backendtest.Apply(t, c, backendtest.Start, back, other)
			if c.Len() != 0 {
				t.Errorf("Len = %d after the refund, want 0", c.Len())
			}
			calls := cnt.calls.Load()
			if d := backendtest.Apply(t, c, backendtest.Start, ch)[0]; !d.Allowed {
				t.Errorf("after the refund: %+v, want admitted", d)
			}
			if cnt.calls.Load() != calls+1 {
				t.Error("the request after the refund did not reach the backend")
			}
			if _, _, bypasses := c.Stats(); bypasses != 1 {
				t.Errorf("%d bypasses, want 1", bypasses)
			}
		})
	}
}

// TestPolicyChange: a raised limit (a reload) does not match the denial
// remembered under the old one.
func TestPolicyChange(t *testing.T) {
	c, cnt := newCounted(t, newStore(t), Options{})
	for _, tc := range []struct {
		name   string
		pol    algo.Policy
		change func(*algo.Policy)
	}{
		{"limit", backendtest.PerMinute(algo.FixedWindow, 1), func(p *algo.Policy) { p.Limit = 5 }},
		{"burst", backendtest.PerMinute(algo.TokenBucket, 1), func(p *algo.Policy) { p.Burst = 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := backendtest.UserCheck(t.Name(), "u", tc.pol, 1)
			backendtest.Apply(t, c, backendtest.Start, ch)
			if d := backendtest.Apply(t, c, backendtest.Start, ch)[0]; d.Allowed {
				t.Fatalf("second request: %+v, want denied", d)
			}
			calls := cnt.calls.Load()
			tc.change(&ch.Policy)
			if d := backendtest.Apply(t, c, backendtest.Start, ch)[0]; !d.Allowed {
				t.Errorf("after the %s changed: %+v, want admitted", tc.name, d)
			}
			if cnt.calls.Load() != calls+1 {
				t.Error("the request under the new policy did not reach the backend")
			}
		})
	}
}

// TestBounded: however many counters are denied, the cache holds at most
// MaxEntries (rounded up to whole shards); long identities are never
// cached.
func TestBounded(t *testing.T) {
	now := backendtest.Start
	c := newCache(t, newStore(t), Options{MaxEntries: 128, MaxKeyBytes: 64, Registerer: prometheus.NewRegistry()})
	blocked := algo.Policy{Algorithm: algo.FixedWindow, Limit: 0, Period: algo.Hour}
	for i := range 5000 {
		backendtest.Apply(t, c, now, backendtest.UserCheck("d", fmt.Sprint("u", i), blocked, 1))
		if i%50 == 0 {
			now += algo.Second
		}
	}
	if n := c.Len(); n > 128 || n < 64 {
		t.Errorf("Len = %d after 5000 denied counters, want ≤ 128 and well used", n)
	}
	if got := testutil.ToFloat64(c.evictC); got == 0 {
		t.Error("no eviction counted")
	}
	long := backendtest.UserCheck("d", strings.Repeat("x", 100), blocked, 1)
	before := c.Len()
	backendtest.Apply(t, c, now, long)
	if c.Len() > before {
		t.Error("a counter with a 100-byte value was cached with MaxKeyBytes 64")
	}
}

// TestErrorPassesThrough: a backend error reaches the caller and is not
// remembered as anything.
func TestErrorPassesThrough(t *testing.T) {
	boom := errors.New("boom")
	c := newCache(t, failing{boom}, Options{})
	if _, err := c.Apply(context.Background(), time.Now(), []algo.Check{backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.GCRA, 1), 1)}); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if c.Len() != 0 {
		t.Errorf("Len = %d after an error, want 0", c.Len())
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

type failing struct{ err error }

func (f failing) Apply(context.Context, time.Time, []algo.Check) ([]algo.Decision, error) {
	return nil, f.err
}

// TestNeverOverAdmits feeds the same random requests, at the same random
// times, to a plain backend and to the cache in front of an identical
// one: every request must get the same overall answer (the cache never
// admits what the backend denies, and here, with one replica and no state
// loss, never denies what it admits either), and every check the cache
// reports denied must be denied by the plain backend. Requests mix
// algorithms, hits (0 included), refunds and limit changes.
func TestNeverOverAdmits(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			steps := 20_000
			if bk.name == "redis" {
				steps = 1000
			}
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					now := backendtest.Start
					plain, domA := bk.make(t)
					next, domB := bk.make(t)
					c, cnt := newCounted(t, next, Options{})
					rng := rand.New(rand.NewPCG(seed, 42))
					for step := range steps {
						var reqA, reqB []algo.Check
						used := map[int]bool{}
						for range 1 + rng.IntN(3) {
							u := rng.IntN(6)
							if used[u] {
								continue
							}
							used[u] = true
							a := algo.Algorithms[u%len(algo.Algorithms)]
							// Now and then the limit changes, as on a reload
							// or with a per-request override.
							pol := algo.Policy{Algorithm: a, Limit: 3, Period: 2 * algo.Second}
							if rng.IntN(10) == 0 {
								pol.Limit = 5
							}
							if (a == algo.TokenBucket || a == algo.GCRA) && rng.IntN(10) == 0 {
								pol.Burst = 6
							}
							ch := backendtest.UserCheck(domA, fmt.Sprint("u", u), pol, int64(rng.IntN(4)))
							if rng.IntN(12) == 0 && ch.Hits > 0 {
								ch.Refund = true
							}
							reqA = append(reqA, ch)
							ch.Domain = domB
							reqB = append(reqB, ch)
						}
						dA := backendtest.Apply(t, plain, now, reqA...)
						dB := backendtest.Apply(t, c, now, reqB...)
						if overall(reqA, dA) != overall(reqB, dB) {
							t.Fatalf("step %d: plain %v, cached %v for %+v", step, dA, dB, reqA)
						}
						for i := range dB {
							if !dB[i].Allowed && dA[i].Allowed && !reqA[i].Refund {
								t.Fatalf("step %d check %d: cache reports denied, backend admits: %+v vs %+v", step, i, dB[i], dA[i])
							}
						}
						now += int64(rng.IntN(400_000))
					}
					hits, misses, bypasses := c.Stats()
					t.Logf("%d hits, %d misses, %d bypasses; %d backend calls", hits, misses, bypasses, cnt.calls.Load())
					if hits == 0 {
						t.Error("the random sequence never hit the cache; the test proves nothing")
					}
				})
			}
		})
	}
}

// overall reports whether a backend admitted the request: every non-refund
// check allowed.
func overall(checks []algo.Check, d []algo.Decision) bool {
	for i := range checks {
		if !checks[i].Refund && !d[i].Allowed {
			return false
		}
	}
	return true
}

// TestConcurrent: concurrent requests through the cache admit exactly the
// limit, and the denials past it are mostly answered locally.
func TestConcurrent(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			next, dom := bk.make(t)
			c, cnt := newCounted(t, next, Options{})
			const workers, each, limit = 8, 50, 40
			ch := backendtest.UserCheck(dom, "hot", backendtest.PerMinute(algo.SlidingWindow, limit), 1)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range each {
						d, err := c.Apply(context.Background(), time.UnixMicro(backendtest.Start), []algo.Check{ch})
						if err != nil {
							t.Error(err)
							return
						}
						if d[0].Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("admitted %d, want exactly %d", got, limit)
			}
			if calls := cnt.calls.Load(); calls >= workers*each {
				t.Errorf("%d backend calls for %d requests: no denial was answered locally", calls, workers*each)
			}
		})
	}
}

// BenchmarkApply measures the cache's own cost on the in-process store: a
// request the backend admits (cache empty, and cache holding other
// counters), and a denial answered from the cache.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	store := newStore(b)
	admit := []algo.Check{backendtest.UserCheck("d", "ok", algo.Policy{Algorithm: algo.TokenBucket, Limit: 1 << 30, Period: algo.Second}, 1)}
	deny := []algo.Check{backendtest.UserCheck("d", "over", algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Hour}, 1)}
	for _, bc := range []struct {
		name   string
		prime  bool
		checks []algo.Check
	}{
		{"direct", false, admit},
		{"admit/empty", false, admit},
		{"admit/nonempty", true, admit},
		{"deny/cached", true, deny},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var be Backend = store
			if bc.name != "direct" {
				c, err := New(store, Options{})
				if err != nil {
					b.Fatal(err)
				}
				be = c
			}
			if bc.prime {
				for range 2 {
					if _, err := be.Apply(ctx, time.Now(), deny); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := be.Apply(ctx, time.Now(), bc.checks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestNeverCached: a denial that no wait lifts (a limit of 0) is cached
// and answered as such, with no Retry-After to promise.
func TestNeverCached(t *testing.T) {
	c, cnt := newCounted(t, newStore(t), Options{Registerer: prometheus.NewRegistry()})
	blocked := backendtest.UserCheck("d", "mallory", algo.Policy{Algorithm: algo.FixedWindow, Limit: 0, Period: algo.Minute}, 1)
	for i := range 3 {
		d := backendtest.Apply(t, c, backendtest.Start, blocked)[0]
		if d.Allowed || d.RetryAfter != algo.Never {
			t.Fatalf("request %d: %+v, want denied with RetryAfter Never", i, d)
		}
	}
	if got := cnt.calls.Load(); got != 1 {
		t.Errorf("%d backend calls for 3 blocked requests, want 1", got)
	}
}

// newStore returns an in-process store.
func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTakeNeedsOneHit: a lease take (algo.Check.Take) of k hits is admitted
// when one hit fits, so a cached denial of more hits must not deny it, and
// its own denial is remembered as a denial of one hit.
func TestTakeNeedsOneHit(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			now := backendtest.Start
			next, dom := bk.make(t)
			c, cnt := newCounted(t, next, Options{})
			pol := backendtest.PerMinute(algo.FixedWindow, 2)
			backendtest.Apply(t, c, now, backendtest.UserCheck(dom, "alice", pol, 1))
			if d := backendtest.Apply(t, c, now, backendtest.UserCheck(dom, "alice", pol, 3)); d[0].Allowed {
				t.Fatalf("3 hits on a limit of 2 admitted: %+v", d)
			}
			take := backendtest.UserCheck(dom, "alice", pol, 5)
			take.Take = true
			if d := backendtest.Apply(t, c, now, take); !d[0].Allowed || d[0].Granted != 1 {
				t.Fatalf("take after a cached 3-hit denial: %+v, want the one hit that fits granted", d)
			}
			before := cnt.calls.Load()
			if d := backendtest.Apply(t, c, now, take); d[0].Allowed {
				t.Fatalf("take on a full window admitted: %+v", d)
			}
			one := backendtest.UserCheck(dom, "alice", pol, 1)
			if d := backendtest.Apply(t, c, now, one); d[0].Allowed || cnt.calls.Load() != before+1 {
				t.Fatalf("a one-hit request after a denied take: %+v, %d backend calls (want it denied from the cache)", d, cnt.calls.Load()-before)
			}
		})
	}
}
