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
// the identity itself, and its integers in a fixed 32-byte entry; only a
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

// entry holds algo.State's integers. No algorithm uses both Frac and
// Count (see algo.State), so one field holds whichever the limit's
// algorithm uses, keeping an entry at 32 bytes.
type entry struct {
	time, fracOrCount, prev int64
	expires                 int64 // unix µs; the state equals "no key" from then on
}

// usesFrac reports whether a's state keeps a fraction rather than a count.
func usesFrac(a algo.Algorithm) bool { return a == algo.TokenBucket || a == algo.GCRA }

func toEntry(a algo.Algorithm, st *algo.State, expires int64) entry {
	e := entry{time: st.Time, fracOrCount: st.Count, prev: st.Prev, expires: expires}
	if usesFrac(a) {
		e.fracOrCount = st.Frac
	}
	return e
}

func (e entry) state(a algo.Algorithm, log []int64) algo.State {
	st := algo.State{Time: e.time, Count: e.fracOrCount, Prev: e.prev, Log: log}
	if usesFrac(a) {
		st.Frac, st.Count = e.fracOrCount, 0
	}
	return st
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
		if ok && e.expires > now {
			sc.states[i] = e.state(checks[i].Policy.Algorithm, sh.logs[sc.keys[i]])
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
		sh.m[k] = toEntry(checks[i].Policy.Algorithm, st, now+ttl)
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
			if e.expires <= now {
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
