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
//
// # The bound on keys, and what it costs
//
// Options.MaxKeys bounds the keys held (0: no bound). Each shard holds at
// most its share of MaxKeys (the shares sum to MaxKeys exactly, and there
// are never more shards than keys), so the bound holds without a global
// counter on the hot path; with random keys the fullest shard fills a
// little before the whole store does (at about 95% of 1 000 000 keys in
// 256 shards). When a new key finds its shard full, the store looks at
// evictSample entries of the shard, as Redis samples for its maxmemory
// policies, never at the keys of the request being applied, and:
//
//  1. drops every expired one among them: that costs nothing, an expired
//     state decides like no state (expired entries outside the sample go
//     at the next Sweep);
//  2. if none was expired, evicts the live one whose state expires first
//     (Redis's volatile-ttl): the counter nearest to "no state" anyway; for
//     a token bucket or GCRA the least used one (a client that sent one
//     request goes before one using its limit), for a window algorithm one
//     last charged in an earlier window before one of the current window;
//  3. if every sampled entry belongs to the request being applied, does
//     not store the new key at all, which is the same as evicting it.
//
// Eviction can over-admit, and only eviction can: an evicted counter starts
// again from no state, so its client may be admitted up to one more full
// capacity (Policy.Capacity: the limit, or the burst of token_bucket and
// gcra) per eviction of its counter, within the period it would have been
// denied in. Cases 2 and 3 are counted (Evictions, and the metric
// envoy_rls_memstore_evictions_total); case 1 is not, it changes no
// decision. A store whose MaxKeys exceeds the counters live at once never
// evicts, and then decides exactly.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/evict"
)

// evictSample is how many entries a full shard looks at to make room
// (pkg/evict, shared with pkg/denycache).
const evictSample = evict.Sample

// Options configures a Store. The zero value is usable.
type Options struct {
	// Shards is the number of independently locked maps, rounded up to a
	// power of two; 0 means 256.
	Shards int
	// MaxKeys bounds the keys held; 0 means no bound. See the package
	// comment for what a full store does and what that can over-admit.
	MaxKeys int
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
	// Registerer receives envoy_rls_memstore_keys and
	// envoy_rls_memstore_evictions_total; nil means no metrics.
	Registerer prometheus.Registerer
	// SweepInterval is how often Run drops expired state; 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
}

// DefaultSweepInterval is Options.SweepInterval's default: expired state
// is never decided on (every read checks its expiry), so the sweep only
// bounds the memory it holds, and a rare one costs little.
const DefaultSweepInterval = 10 * time.Second

// Store is an in-process Backend. It is safe for concurrent use.
type Store struct {
	shards []shard
	mask   uint64
	seeds  [2]maphash.Seed
	now    func() time.Time
	bufs   sync.Pool
	// capped says the shards' max fields apply (Options.MaxKeys > 0).
	capped     bool
	sweepEvery time.Duration
	evictions  atomic.Uint64
}

type shard struct {
	mu   sync.Mutex
	m    map[key]entry
	logs map[key][]int64 // sliding-log entries or sub-window counts, beside their entry in m
	max  int             // this shard's share of Options.MaxKeys
	_    [24]byte        // keep neighbouring shard locks off one cache line
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
//	sliding_window  until = the expiry, n = Time; the sub-window counts
//	in N ≥ 2        are in shard.logs
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
	switch shape(p) {
	case fixedWindow:
		return entry{until: st.Time + p.Period, n: st.Count}
	case subWindows:
		// The counts are in shard.logs, n is Time.
		return entry{until: now + ttl - 1, n: st.Time}
	case slidingWindow:
		return entry{until: st.Time + 2*p.Period, n: st.Count, prev: st.Prev}
	case bucket:
		return entry{until: st.Time, n: st.Frac}
	}
	return entry{until: now + ttl - 1}
}

// The entry layouts: algo's state shapes (the algorithm table), with a
// window told apart by whether it keeps Prev or sub-windows.
const (
	logged = iota
	fixedWindow
	slidingWindow
	subWindows
	bucket
)

// shape returns the entry layout of p's state.
func shape(p algo.Policy) int {
	spec, _ := p.Algorithm.Spec()
	switch {
	case spec.Shape == algo.ShapeBucket:
		return bucket
	case spec.Shape != algo.ShapeWindow:
		return logged
	case p.Windows() > 1:
		return subWindows
	case p.Algorithm == algo.SlidingWindow:
		return slidingWindow
	}
	return fixedWindow
}

// counts returns the slice of st that shard.logs keeps: a sliding log's
// entries or a sub-windowed sliding window's counts (no state has both).
func counts(st *algo.State) []int64 {
	if len(st.Subs) > 0 {
		return st.Subs
	}
	return st.Log
}

// state is the inverse of toEntry.
func (e entry) state(p algo.Policy, log []int64) algo.State {
	switch shape(p) {
	case fixedWindow:
		return algo.State{Time: e.until - p.Period, Count: e.n}
	case subWindows:
		return algo.State{Time: e.n, Subs: log}
	case slidingWindow:
		return algo.State{Time: e.until - 2*p.Period, Count: e.n, Prev: e.prev}
	case bucket:
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
func New(opts Options) (*Store, error) {
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: MaxKeys %d must be 0 (no bound) or positive", opts.MaxKeys)
	}
	if opts.Shards < 0 {
		return nil, fmt.Errorf("memstore: Shards %d must be 0 (default) or positive", opts.Shards)
	}
	if opts.SweepInterval < 0 {
		return nil, fmt.Errorf("memstore: SweepInterval %v must be 0 (default) or positive", opts.SweepInterval)
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	n := 256
	if opts.Shards > 0 {
		n = 1
		for n < opts.Shards {
			n <<= 1
		}
	}
	// Every shard must be able to hold a key, so a small bound gets fewer
	// shards.
	for opts.MaxKeys > 0 && n > opts.MaxKeys {
		n >>= 1
	}
	s := &Store{shards: make([]shard, n), mask: uint64(n - 1), seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, now: opts.Now, capped: opts.MaxKeys > 0, sweepEvery: opts.SweepInterval}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[key]entry)
		sh.logs = make(map[key][]int64)
		// The shares sum to MaxKeys exactly: the first MaxKeys mod n
		// shards take one more.
		sh.max = opts.MaxKeys / n
		if i < opts.MaxKeys%n {
			sh.max++
		}
	}
	s.bufs.New = func() any { return new(scratch) }
	if opts.Registerer != nil {
		if err := s.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("memstore: register metrics: %w", err)
		}
	}
	return s, nil
}

// register exports the key count and the evictions. Both are read at
// scrape time, so the request path pays nothing for them.
func (s *Store) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "envoy_rls_memstore_keys",
			Help: "Keys held by the in-process store: the live ones, and expired ones until a sweep or a full shard drops them.",
		}, func() float64 { return float64(s.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "envoy_rls_memstore_evictions_total",
			Help: "Live keys the in-process store dropped to stay within its bound; each may let its client be admitted up to one more full limit.",
		}, func() float64 { return float64(s.Evictions()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Every backend layer implements the one contract.
var _ algo.Applier = (*Store)(nil)

// Apply implements algo.Applier, whose comment states the contract.
func (s *Store) Apply(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := at.UnixMicro()
	sc := s.bufs.Get().(*scratch)
	defer func() { sc.release(); s.bufs.Put(sc) }()
	sc.prepare(len(checks))
	for i := range checks {
		sc.ids = checks[i].AppendIdentity(sc.ids[:0])
		k := s.key(sc.ids)
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
		if s.capped && len(sh.m) >= sh.max {
			if _, ok := sh.m[k]; !ok && !s.makeRoom(sh, now, sc.keys) {
				continue
			}
		}
		sh.m[k] = toEntry(checks[i].Policy, st, now, ttl)
		if l := counts(st); len(l) > 0 {
			sh.logs[k] = l
		} else {
			delete(sh.logs, k)
		}
	}
	for _, si := range sc.locked {
		s.shards[si].mu.Unlock()
	}
	return slices.Clone(sc.out), nil
}

// key hashes a check's identity.
func (s *Store) key(id []byte) key {
	return key{maphash.Bytes(s.seeds[0], id), maphash.Bytes(s.seeds[1], id)}
}

// makeRoom frees one place in the full shard sh for a new key, as the
// package comment describes, and reports whether it did; false means the
// new key must not be stored (it counts as evicted). The keys of the request
// being applied are never dropped. The caller holds sh.mu.
func (s *Store) makeRoom(sh *shard, now int64, request []key) bool {
	expired, evicted := evict.Sampled(sh.m,
		func(e entry) bool { return e.until < now },
		func(e entry) int64 { return e.until },
		func(k key) bool { return slices.Contains(request, k) },
		func(k key) { delete(sh.logs, k) })
	if expired > 0 {
		return true
	}
	s.evictions.Add(1)
	return evicted
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

// Evictions returns how many live keys the store has dropped, or refused to
// store, to stay within Options.MaxKeys.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

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

// Run sweeps every Options.SweepInterval until ctx ends. It returns nil.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sweep()
		}
	}
}

// Peek reads the state of each check's counter at at without changing it,
// for tools (the live explain endpoint): it takes each shard's lock only to
// copy an entry, drops nothing and counts nothing. The TTL is the state's
// algo.Expiry, which is what the store keeps it for.
func (s *Store) Peek(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Peeked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := at.UnixMicro()
	out := make([]algo.Peeked, len(checks))
	var id []byte
	for i := range checks {
		id = checks[i].AppendIdentity(id[:0])
		k := s.key(id)
		sh := &s.shards[k[0]&s.mask]
		sh.mu.Lock()
		e, ok := sh.m[k]
		var st algo.State
		if ok && e.until >= now {
			st = e.state(checks[i].Policy, slices.Clone(sh.logs[k]))
		}
		sh.mu.Unlock()
		p := &out[i]
		p.Now, p.State = now, st
		if p.TTL = algo.Expiry(checks[i].Policy, st, now); p.TTL > 0 {
			p.Exists = true
		}
	}
	return out, nil
}
