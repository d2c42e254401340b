// Package memstore is the in-process backend: it keeps each limit's
// algo.State in memory and applies a request's checks atomically with the
// pure cores in pkg/algo. It is the embedded default for a single replica and
// the fallback store for the "local" Redis failure mode.
//
// State lives in sharded maps, each behind its own mutex; a request locks
// the shards it touches in ascending order, so requests on different keys
// run in parallel and no two requests deadlock. Expired state is dropped
// lazily on access and by Sweep. memstore must not import other backends or
// anything that knows about gRPC.
//
// Memory: a limit is stored under a 128-bit hash of its identity instead of
// the identity itself, and its integers in a fixed 24-byte entry; only a
// sliding log keeps a slice, in a side map. Two identities share a counter
// only if their hashes collide, which for n live keys happens with
// probability about n²/2¹²⁹ (for a billion keys, 1 in 10²¹).
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Shards is the number of independently locked maps, rounded up to a
	// power of two; 0 means 256.
	Shards int
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
}

// Store is an in-process Backend. It is safe for concurrent use.
type Store struct {
	shards []shard
	mask   uint64
	seeds  [2]maphash.Seed
	now    func() time.Time
	bufs   sync.Pool
}

type shard struct {
	mu   sync.Mutex
	m    map[key]entry
	logs map[key][]int64 // sliding-log entries, beside their entry in m
	_    [32]byte        // keep neighbouring shard locks off one cache line
}

// key is a 128-bit hash of a check's identity.
type key [2]uint64

// entry holds algo.State's integers in 24 bytes: no algorithm uses both
// Frac and Count (see algo.State), and instead of an expiry time the entry
// keeps one field anchored so that the state is certainly past its
// algo.Expiry once now > until, which Sweep checks without knowing the
// limit's policy:
//
//	fixed_window    until = Time + Period (the window's end, its expiry)
//	sliding_window  until = Time + 2·Period (its expiry when Count > 0, a
//	                later one otherwise)
//	sliding_log     until = the expiry; the log itself is in shard.logs
//	token_bucket,   until = Time (the TAT; the expiry is at most 1 µs later)
//	gcra
//
// Keeping a state past its expiry is harmless: it decides like no state.
type entry struct {
	until, n, prev int64 // n is Count or Frac
}

// toEntry stores st, whose algo.Expiry at now is ttl > 0, under policy p.
func toEntry(p algo.Policy, st *algo.State, now, ttl int64) entry {
	switch p.Algorithm {
	case algo.FixedWindow:
		return entry{until: st.Time + p.Period, n: st.Count}
	case algo.SlidingWindow:
		return entry{until: st.Time + 2*p.Period, n: st.Count, prev: st.Prev}
	case algo.TokenBucket, algo.GCRA:
		return entry{until: st.Time, n: st.Frac}
	}
	return entry{until: now + ttl - 1}
}

// state is the inverse of toEntry.
func (e entry) state(p algo.Policy, log []int64) algo.State {
	switch p.Algorithm {
	case algo.FixedWindow:
		return algo.State{Time: e.until - p.Period, Count: e.n}
	case algo.SlidingWindow:
		return algo.State{Time: e.until - 2*p.Period, Count: e.n, Prev: e.prev}
	case algo.TokenBucket, algo.GCRA:
		return algo.State{Time: e.until, Frac: e.n}
	}
	return algo.State{Log: log}
}

// scratch is the per-Apply working memory, pooled.
type scratch struct {
	ids    []byte
	keys   []key
	shard  []int
	locked []int
	states []algo.State
	out    []algo.Decision
}

// New returns an empty Store.
func New(opts Options) *Store {
	n := 256
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].m = make(map[key]entry)
		s.shards[i].logs = make(map[key][]int64)
	}
	s.bufs.New = func() any { return new(scratch) }
	return s
}

// Apply implements the backend contract: one decision per check, and no
// consumption at all unless every consuming check is admitted.
func (s *Store) Apply(ctx context.Context, checks []algo.Check) ([]algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now().UnixMicro()
	sc := s.bufs.Get().(*scratch)
	defer func() { sc.release(); s.bufs.Put(sc) }()
	sc.prepare(len(checks))
	for i := range checks {
		sc.ids = checks[i].AppendIdentity(sc.ids[:0])
		k := key{maphash.Bytes(s.seeds[0], sc.ids), maphash.Bytes(s.seeds[1], sc.ids)}
		sc.keys[i] = k
		sc.shard[i] = int(k[0] & s.mask)
	}
	sc.locked = append(sc.locked[:0], sc.shard...)
	slices.Sort(sc.locked)
	sc.locked = slices.Compact(sc.locked)
	for _, si := range sc.locked {
		s.shards[si].mu.Lock()
	}
	for i := range checks {
		sh := &s.shards[sc.shard[i]]
		e, ok := sh.m[sc.keys[i]]
		if ok && e.until >= now {
			sc.states[i] = e.state(checks[i].Policy, sh.logs[sc.keys[i]])
		} else {
			sc.states[i] = algo.State{}
		}
	}
	algo.ApplyAll(checks, sc.states, now, sc.out)
	for i := range checks {
		sh := &s.shards[sc.shard[i]]
		k, st := sc.keys[i], &sc.states[i]
		ttl := algo.Expiry(checks[i].Policy, *st, now)
		if ttl <= 0 {
			delete(sh.m, k)
			delete(sh.logs, k)
			continue
		}
		sh.m[k] = toEntry(checks[i].Policy, st, now, ttl)
		if len(st.Log) > 0 {
			sh.logs[k] = st.Log
		} else {
			delete(sh.logs, k)
		}
	}
	for _, si := range sc.locked {
		s.shards[si].mu.Unlock()
	}
	return slices.Clone(sc.out), nil
}

func (sc *scratch) prepare(n int) {
	sc.keys = slices.Grow(sc.keys[:0], n)[:n]
	sc.shard = slices.Grow(sc.shard[:0], n)[:n]
	sc.states = slices.Grow(sc.states[:0], n)[:n]
	sc.out = slices.Grow(sc.out[:0], n)[:n]
	clear(sc.states)
}

// release drops references into the shards so a pooled scratch does not
// keep sliding logs alive.
func (sc *scratch) release() {
	clear(sc.states)
}

// Sweep drops every expired entry and returns how many remain. Run calls it
// periodically; it holds one shard lock at a time.
func (s *Store) Sweep() int {
	now := s.now().UnixMicro()
	live := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.until < now {
				delete(sh.m, k)
				delete(sh.logs, k)
			}
		}
		live += len(sh.m)
		sh.mu.Unlock()
	}
	return live
}

// Len returns the number of stored keys, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].m)
		s.shards[i].mu.Unlock()
	}
	return n
}

// Run sweeps every interval until ctx ends.
func (s *Store) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep()
		}
	}
}
