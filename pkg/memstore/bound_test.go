package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// has reports whether c's counter is stored, expired or not.
func (s *Store) has(c algo.Check) bool {
	k := s.key(c.AppendIdentity(nil))
	sh := &s.shards[k[0]&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[k]
	return ok
}

// frozenStore returns a store whose clock stays at backendtest.Start until
// the test moves now, so nothing expires unless the test says so.
func frozenStore(tb testing.TB, opts Options) (*Store, *atomic.Int64) {
	tb.Helper()
	var now atomic.Int64
	now.Store(backendtest.Start)
	opts.Now = clockFrom(&now)
	return newStore(tb, opts), &now
}

func TestNewRejectsBadOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	newStore(t, Options{Registerer: reg})
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"negative MaxKeys", Options{MaxKeys: -1}, "MaxKeys -1"},
		{"negative Shards", Options{Shards: -4}, "Shards -4"},
		{"negative SweepInterval", Options{SweepInterval: -time.Second}, "SweepInterval -1s"},
		{"metrics registered twice", Options{Registerer: reg}, "register metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "memstore: ") {
				t.Fatalf("New(%+v) = %v, %v; want an error naming %q", tt.opts, s, err, tt.want)
			}
		})
	}
}

// TestMaxKeysHeld: with nothing expired, the store never holds more than
// MaxKeys, fills up to exactly MaxKeys (the shards' shares add up), and
// every new key it was given is either held or counted as evicted.
func TestMaxKeysHeld(t *testing.T) {
	tests := []struct {
		name            string
		shards, maxKeys int
	}{
		{"one key", 0, 1},
		{"fewer keys than shards", 0, 10},
		{"uneven shares", 16, 17},
		{"one shard", 1, 5},
		{"many keys per shard", 4, 100},
		{"default shards", 0, 1000},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, now := frozenStore(t, Options{Shards: tt.shards, MaxKeys: tt.maxKeys})
			given := 0
			for req := range 3000 {
				// Several new keys per request, so a full shard also meets
				// a request whose own keys fill it.
				checks := make([]algo.Check, 1+r.IntN(4))
				for j := range checks {
					a := algo.Algorithms[r.IntN(len(algo.Algorithms))]
					checks[j] = backendtest.UserCheck("d", fmt.Sprint(req, "/", j), backendtest.PerMinute(a, 10), 1)
				}
				backendtest.Apply(t, s, now.Load(), checks...)
				given += len(checks)
				if n := s.Len(); n > tt.maxKeys {
					t.Fatalf("request %d: %d keys held, MaxKeys %d", req, n, tt.maxKeys)
				}
			}
			if n := s.Len(); n != tt.maxKeys {
				t.Errorf("%d keys held after %d new ones, want MaxKeys = %d", n, given, tt.maxKeys)
			}
			if held, ev := s.Len(), s.Evictions(); uint64(held)+ev != uint64(given) {
				t.Errorf("%d held + %d evicted = %d, want the %d keys given", held, ev, uint64(held)+ev, given)
			}
		})
	}
}

// TestMaxKeysReclaimsExpiredFirst: a full store makes room by dropping
// expired keys before any live one; only when none is expired does it evict.
// One shard of evictSample keys, so every sample sees the whole shard.
func TestMaxKeysReclaimsExpiredFirst(t *testing.T) {
	s, now := frozenStore(t, Options{Shards: 1, MaxKeys: evictSample})
	second := algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Second}
	check := func(wave, i int) algo.Check { return backendtest.UserCheck("d", fmt.Sprint(wave, "/", i), second, 1) }
	for i := range evictSample {
		backendtest.Apply(t, s, now.Load(), check(1, i))
	}
	now.Add(2 * algo.Second)
	for i := range evictSample {
		backendtest.Apply(t, s, now.Load(), check(2, i))
	}
	if ev := s.Evictions(); ev != 0 {
		t.Fatalf("%d live keys evicted while expired ones could be reclaimed", ev)
	}
	for i := range evictSample {
		if s.has(check(1, i)) || !s.has(check(2, i)) {
			t.Fatalf("key %d: first wave held %v, second wave held %v; want only the second", i, s.has(check(1, i)), s.has(check(2, i)))
		}
	}
	backendtest.Apply(t, s, now.Load(), check(3, 0))
	if ev, n := s.Evictions(), s.Len(); ev != 1 || n != evictSample {
		t.Fatalf("a new key on a store full of live keys: %d evictions, %d keys; want 1 and %d", ev, n, evictSample)
	}
}

// TestEvictsSoonestExpiry: the live key evicted is the one whose state
// expires first; for a token bucket that is the client that used the least.
func TestEvictsSoonestExpiry(t *testing.T) {
	s, now := frozenStore(t, Options{Shards: 1, MaxKeys: 3})
	perSecond := algo.Policy{Algorithm: algo.TokenBucket, Limit: 60, Period: algo.Minute} // one token a second
	user := func(name string, hits int64) algo.Check { return backendtest.UserCheck("d", name, perSecond, hits) }
	backendtest.Apply(t, s, now.Load(), user("heavy", 30)) // full again in 30 s
	backendtest.Apply(t, s, now.Load(), user("light", 1))  // in 1 s
	backendtest.Apply(t, s, now.Load(), user("middle", 10))
	backendtest.Apply(t, s, now.Load(), user("new", 2))
	for _, tt := range []struct {
		name string
		held bool
	}{{"heavy", true}, {"light", false}, {"middle", true}, {"new", true}} {
		if got := s.has(user(tt.name, 0)); got != tt.held {
			t.Errorf("%s held = %v, want %v", tt.name, got, tt.held)
		}
	}
	if ev := s.Evictions(); ev != 1 {
		t.Errorf("Evictions = %d, want 1", ev)
	}
}

// TestEvictionOverAdmission computes what eviction can cost: a counter
// evicted e times admits at most (1+e)·Capacity within a period in which it
// would have admitted Capacity. Time is frozen, so without eviction every
// counter would admit exactly Capacity.
func TestEvictionOverAdmission(t *testing.T) {
	for _, a := range algo.Algorithms {
		pol := algo.Policy{Algorithm: a, Limit: 5, Period: algo.Minute}
		if a == algo.TokenBucket || a == algo.GCRA {
			pol.Burst = 8
		}
		capacity := pol.Capacity()
		t.Run(a.String()+"/tight", func(t *testing.T) {
			// The bound is reached: drain the counter, have it evicted by
			// a later-expiring filler, drain it again.
			s, now := frozenStore(t, Options{Shards: 1, MaxKeys: 2})
			victim := backendtest.UserCheck("d", "victim", pol, 1)
			filler := pol
			filler.Period = algo.Hour // expires after the victim, so it is not chosen
			admitted, evicted := int64(0), 0
			for round := range 3 {
				for range capacity + 1 {
					if backendtest.Apply(t, s, now.Load(), victim)[0].Allowed {
						admitted++
					}
				}
				if round == 2 {
					break
				}
				for i := 0; s.has(victim); i++ {
					if i == 10 {
						t.Fatalf("round %d: the victim survived %d new keys on a store of 2", round, i)
					}
					backendtest.Apply(t, s, now.Load(), backendtest.UserCheck("d", fmt.Sprint("filler", round, "/", i), filler, 1))
				}
				evicted++
			}
			if want := capacity * int64(1+evicted); admitted != want {
				t.Fatalf("admitted %d hits with %d evictions, want (1+%d)·%d = %d", admitted, evicted, evicted, capacity, want)
			}
		})
		t.Run(a.String()+"/random", func(t *testing.T) {
			// The bound holds per counter under random traffic on more
			// counters than the store holds.
			s, now := frozenStore(t, Options{Shards: 1, MaxKeys: 4})
			r := rand.New(rand.NewPCG(5, uint64(a)))
			pool := make([]algo.Check, 9)
			for i := range pool {
				pool[i] = backendtest.UserCheck("d", fmt.Sprint("u", i), pol, 0)
			}
			admitted, evicted := make([]int64, len(pool)), make([]int, len(pool))
			held := make([]bool, len(pool))
			for range 3000 {
				i := r.IntN(len(pool))
				c := pool[i]
				c.Hits = 1 + r.Int64N(2)
				if backendtest.Apply(t, s, now.Load(), c)[0].Allowed {
					admitted[i] += c.Hits
				}
				for j := range pool {
					now := s.has(pool[j])
					if held[j] && !now {
						evicted[j]++
					}
					held[j] = now
				}
			}
			total, over := 0, int64(0)
			for i := range pool {
				if bound := capacity * int64(1+evicted[i]); admitted[i] > bound {
					t.Errorf("counter %d admitted %d hits with %d evictions, above (1+%d)·%d = %d", i, admitted[i], evicted[i], evicted[i], capacity, bound)
				}
				total += evicted[i]
				over += max(0, admitted[i]-capacity)
			}
			if uint64(total) != s.Evictions() {
				t.Errorf("counters saw %d evictions, Evictions() = %d", total, s.Evictions())
			}
			if total == 0 || over == 0 {
				t.Fatalf("%d evictions, %d hits over capacity: the traffic did not exercise eviction", total, over)
			}
		})
	}
}

// TestMetrics: the key gauge and the eviction counter reach Prometheus.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, now := frozenStore(t, Options{Shards: 1, MaxKeys: 2, Registerer: reg})
	for i := range 5 {
		backendtest.Apply(t, s, now.Load(), backendtest.UserCheck("d", fmt.Sprint(i), backendtest.PerMinute(algo.FixedWindow, 3), 1))
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{"envoy_rls_memstore_keys": 2, "envoy_rls_memstore_evictions_total": 3} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (gathered %v)", name, got[name], want, got)
		}
	}
}

// BenchmarkApplyFull: every request brings a new key to a full store, so
// each one evicts.
func BenchmarkApplyFull(b *testing.B) {
	s := newStore(b, Options{MaxKeys: 4096})
	checks := make([][]algo.Check, 1<<16)
	for i := range checks {
		checks[i] = []algo.Check{backendtest.UserCheck("d", fmt.Sprint("user", i), algo.Policy{Algorithm: algo.TokenBucket, Limit: 1 << 30, Period: algo.Second}, 1)}
	}
	ctx := context.Background()
	for _, c := range checks[:8192] {
		if _, err := s.Apply(ctx, time.Now(), c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Apply(ctx, time.Now(), checks[i]); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(checks)
	}
}
