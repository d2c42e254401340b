package memstore

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

func clockFrom(now *atomic.Int64) func() time.Time {
	return func() time.Time { return time.UnixMicro(now.Load()) }
}

func TestBackendSuite(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Backend {
		return newStore(t, Options{})
	})
	t.Run("Peek", func(t *testing.T) {
		backendtest.RunPeek(t, func(t *testing.T) backendtest.Peeker { return newStore(t, Options{}) })
	})
}

// TestPeekStoresNothing: peeking at counters the store does not hold adds
// no key.
func TestPeekStoresNothing(t *testing.T) {
	s := newStore(t, Options{})
	c := algo.Check{Domain: "d", HashTag: -1, Entries: []algo.Entry{{Key: "k", Value: "v"}}, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Second}}
	p, err := s.Peek(context.Background(), time.UnixMicro(backendtest.Start), []algo.Check{c})
	if err != nil || len(p) != 1 || p[0].Exists || s.Len() != 0 {
		t.Fatalf("Peek = %+v, %v; store holds %d keys, want none", p, err, s.Len())
	}
}

// newStore returns New(opts), failing t on an error.
func newStore(tb testing.TB, opts Options) *Store {
	tb.Helper()
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestExpiry: state disappears once its TTL passes, lazily and by Sweep.
func TestExpiry(t *testing.T) {
	var now atomic.Int64
	now.Store(backendtest.Start)
	s := newStore(t, Options{Shards: 4, Now: clockFrom(&now)})
	for _, a := range algo.Algorithms {
		c := algo.Check{Domain: "d", HashTag: -1, Entries: []algo.Entry{{Key: "k", Value: a.String()}},
			Policy: algo.Policy{Algorithm: a, Limit: 2, Period: algo.Second}, Hits: 1}
		if _, err := s.Apply(context.Background(), time.UnixMicro(now.Load()), []algo.Check{c}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != len(algo.Algorithms) {
		t.Fatalf("Len = %d after one hit per algorithm, want %d", n, len(algo.Algorithms))
	}
	now.Add(3 * algo.Second)
	if n := s.Sweep(); n != 0 {
		t.Fatalf("Sweep left %d live keys after every TTL passed", n)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newStore(t, Options{}).Apply(ctx, time.Now(), nil); err == nil {
		t.Fatal("Apply on a canceled context succeeded")
	}
}

func BenchmarkApply(b *testing.B) {
	s := newStore(b, Options{})
	c := []algo.Check{{Domain: "d", HashTag: -1, Entries: []algo.Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/x"}},
		Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 1 << 30, Period: algo.Second}, Hits: 1}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Apply(context.Background(), time.Now(), c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEntryRoundTrip: every state the algorithms produce is stored and read
// back unchanged (in the fields its algorithm uses), and the entry's until
// never falls before the state's expiry, so Sweep drops nothing live.
func TestEntryRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			for _, period := range []int64{algo.Second, 7 * algo.Second, algo.Minute, 86400 * algo.Second} {
				p := algo.Policy{Algorithm: a, Limit: 1 + r.Int64N(20), Period: period}
				var st algo.State
				now := backendtest.Start
				for step := range 2000 {
					now += r.Int64N(period / 4)
					st, _ = algo.Step(p, st, now, r.Int64N(3), r.IntN(10) == 0)
					ttl := algo.Expiry(p, st, now)
					if ttl <= 0 {
						st = algo.State{}
						continue
					}
					e := toEntry(p, &st, now, ttl)
					if e.until+1 < now+ttl {
						t.Fatalf("step %d: until %d before the expiry %d", step, e.until, now+ttl)
					}
					got := e.state(p, st.Log)
					if got.Time != st.Time && a != algo.SlidingLog || got.Count != st.Count || got.Prev != st.Prev || got.Frac != st.Frac || len(got.Log) != len(st.Log) {
						t.Fatalf("step %d: stored %+v, read back %+v", step, st, got)
					}
				}
			}
		})
	}
}
