// Package denycache is the local deny cache (docs/architecture.md#layers):
// a wrapper around a rate-limit backend (Redis, in production) that
// remembers, per limit, "a request of at least h hits is denied until T"
// from the backend's own denials, and answers such requests in-process
// until T without calling the backend. Under a flood of over-limit
// traffic most denials then cost no Redis round trip.
//
// # Why it never over-admits
//
// The cache never admits anything: a request it does not deny goes to the
// backend, which decides. It only denies a request the backend would deny
// too, and a denied request consumes nothing, in the backend or here.
//
// The backend denies a request when any of its non-refund checks is denied
// (all or nothing; a check-only check that is over its limit counts). When
// the backend denies a check of h hits at time t with RetryAfter R, no
// request of h' ≥ h hits on the same counter and policy can be admitted
// before t+R: every algorithm here (fixed and sliding window, sliding log,
// token bucket, GCRA) only moves that instant later when other requests
// consume, and only a refund or a lost state moves it earlier. T is taken
// as the local time just before the backend was called plus R, which is
// never later than the backend's own t+R. A denial that no wait lifts
// (RetryAfter Never: a limit of 0, or more hits than the capacity, which
// more hits exceed too) holds while the policy does; it is cached for one
// period and answered as Never.
//
// What can move the instant earlier is handled so:
//   - a refund (is_negative_hits) through this cache evicts the counter's
//     entry, before and after the backend applies it, and a request racing
//     with it records nothing (an epoch counter); requests that carry a
//     refund always go to the backend, so the refund is applied;
//   - a changed limit (a reload, or a per-request override) does not match
//     the entry, whose key is the counter's identity (algo.Check
//     .AppendIdentity) and which stores the limit and the
//     burst: a mismatch goes to the backend and replaces the entry;
//   - a refund on another replica, or counter state lost in Redis (restart
//     without persistence, eviction), is not seen here: this replica then
//     denies that counter until T, at most one period or the wait the
//     backend announced. That under-admits; it never over-admits.
//
// # What a cached denial reports
//
// The checks known to be denied report {Allowed: false, Remaining: 0,
// ResetAfter and RetryAfter: T − now} (RetryAfter Never for a denial no
// wait lifts). The other checks of the request were not
// evaluated; they report what an untouched counter would (allowed,
// Remaining = the policy's capacity, ResetAfter 0), so the denying check is
// always the most restrictive status of the response and rate-limit headers
// describe it.
//
// Memory is bounded by a count of entries (sharded maps; a full shard drops
// an expired entry or the one expiring first among a few sampled) and by a
// key size: counters with a longer identity are never cached.
//
// denycache must not import any backend, pkg/rls or anything that knows
// about gRPC; it consumes the Backend interface it declares.
package denycache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/evict"
	"github.com/envoy-rls/envoy-rls/pkg/shardmap"
)

// Backend is the next layer: the backend layer contract, algo.Applier.
type Backend = algo.Applier

// Defaults for Options.
const (
	DefaultMaxEntries  = 100_000
	DefaultMaxKeyBytes = 512
)

// Options configures a Cache. The zero value is usable.
type Options struct {
	// MaxEntries bounds the remembered denials; 0 means DefaultMaxEntries.
	MaxEntries int
	// MaxKeyBytes bounds the identity of a cached counter; counters with a
	// longer one (very long descriptor values) are never cached. 0 means
	// DefaultMaxKeyBytes.
	MaxKeyBytes int
	// Registerer receives envoy_rls_deny_cache_requests_total{result=hit|
	// miss|bypass}, envoy_rls_deny_cache_evictions_total and
	// envoy_rls_deny_cache_entries; nil means no metrics.
	Registerer prometheus.Registerer
}

// Cache is a Backend that answers known denials locally and passes
// everything else to the backend it wraps. It is safe for concurrent use.
type Cache struct {
	next     Backend
	maxKey   int
	perShard int
	shards   shardmap.Map[entry]
	size     atomic.Int64
	// epoch changes whenever a refund evicts: a request that saw it change
	// while it was at the backend must not record a denial the refund may
	// already have made stale.
	epoch atomic.Uint64
	bufs  sync.Pool

	hits, misses, bypasses atomic.Uint64
	// Prometheus twins of the counts; nil without a Registerer.
	hitC, missC, bypassC, evictC prometheus.Counter
}

// entry says: a request of at least hits hits on this counter, under the
// policy with this limit and burst (the algorithm and period are in the
// key), is denied until the Unix µs until.
type entry struct {
	limit, burst int64
	hits         int64
	until        int64
	// never marks a denial that no wait lifts (RetryAfter Never).
	never bool
}

// scratch is the per-Apply working memory, pooled.
type scratch struct {
	keys []byte
	// starts[i], ends[i] delimit check i's key in keys; ends[i] is -1 for
	// a check that is never cached (its key is too long).
	starts, ends []int
	shards       []int
	until        []int64 // per check: denied until (0: not known to be denied)
	never        []bool  // per check: its denial is one no wait lifts
}

// New returns a Cache in front of next.
func New(next Backend, opts Options) (*Cache, error) {
	if next == nil {
		return nil, errors.New("denycache: New: nil backend")
	}
	c := &Cache{next: next, maxKey: opts.MaxKeyBytes}
	if c.maxKey <= 0 {
		c.maxKey = DefaultMaxKeyBytes
	}
	n := opts.MaxEntries
	if n <= 0 {
		n = DefaultMaxEntries
	}
	c.perShard = max(1, (n+shardmap.Count-1)/shardmap.Count)
	c.shards.Init()
	c.bufs.New = func() any { return new(scratch) }
	if opts.Registerer != nil {
		if err := c.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("denycache: register metrics: %w", err)
		}
	}
	return c, nil
}

// Every backend layer implements the one contract.
var _ algo.Applier = (*Cache)(nil)

// Apply implements algo.Applier (the contract is stated there). A request of which some
// non-refund check is known to be denied is denied here (see the package
// comment for what it reports); a request that carries a refund or a
// charge, and every other request, goes to the wrapped backend, whose
// denials are remembered (but a charge's request's).
func (c *Cache) Apply(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if len(checks) == 0 {
		return c.next.Apply(ctx, at, checks)
	}
	for i := range checks {
		if checks[i].Refund {
			return c.applyRefund(ctx, at, checks)
		}
	}
	for i := range checks {
		if checks[i].Charge && checks[i].Hits > 0 {
			// A charge is counted whatever is known of its limits
			// (algo.Check.Charge): it must reach the backend. Its
			// denials are not recorded, and none it makes is lost by
			// that: the next request finds them in the backend.
			count(&c.bypasses, c.bypassC)
			return c.next.Apply(ctx, at, checks)
		}
	}
	now := at.UnixMicro()
	s := c.bufs.Get().(*scratch)
	defer c.bufs.Put(s)
	// Keys are computed only when needed: an empty cache and a request the
	// backend admits cost nothing here.
	keyed := false
	if c.size.Load() > 0 {
		c.keys(s, checks)
		keyed = true
		if c.lookup(s, checks, now) {
			count(&c.hits, c.hitC)
			return answer(s, checks, now), nil
		}
	}
	count(&c.misses, c.missC)
	epoch := c.epoch.Load()
	out, err := c.next.Apply(ctx, at, checks)
	if err != nil || len(out) != len(checks) || c.epoch.Load() != epoch {
		return out, err
	}
	for i := range checks {
		d := out[i]
		if d.Allowed || d.RetryAfter == 0 {
			continue
		}
		until := now + d.RetryAfter
		if d.RetryAfter == algo.Never {
			// No wait lifts it (a limit of 0, or more hits than the
			// capacity, which more hits exceed too); it holds while the
			// policy does, so cache it for a period.
			until = now + checks[i].Policy.Period
		} else if until -= queueSlack(&checks[i]); until <= now {
			continue
		}
		if !keyed {
			c.keys(s, checks)
			keyed = true
		}
		if s.ends[i] >= 0 {
			c.record(s, i, checks[i], until, d.RetryAfter == algo.Never, now)
		}
	}
	return out, nil
}

// applyRefund passes a request with a refund to the backend, evicting the
// refunded counters before and after, so that no denial recorded around
// the refund survives it.
func (c *Cache) applyRefund(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	count(&c.bypasses, c.bypassC)
	s := c.bufs.Get().(*scratch)
	defer c.bufs.Put(s)
	c.keys(s, checks)
	c.evictRefunds(s, checks)
	out, err := c.next.Apply(ctx, at, checks)
	c.evictRefunds(s, checks)
	return out, err
}

func (c *Cache) evictRefunds(s *scratch, checks []algo.Check) {
	c.epoch.Add(1)
	for i := range checks {
		if !checks[i].Refund || s.ends[i] < 0 {
			continue
		}
		sh := c.shards.Shard(s.shards[i])
		sh.Mu.Lock()
		if _, ok := sh.M[string(s.key(i))]; ok {
			delete(sh.M, string(s.key(i)))
			c.size.Add(-1)
		}
		sh.Mu.Unlock()
	}
}

// keys computes every check's key and shard into s; a check whose key is
// too long gets ends[i] = -1 and is never cached.
func (c *Cache) keys(s *scratch, checks []algo.Check) {
	s.keys, s.starts, s.ends, s.shards = s.keys[:0], s.starts[:0], s.ends[:0], s.shards[:0]
	for i := range checks {
		start := len(s.keys)
		s.keys = checks[i].AppendIdentity(s.keys)
		s.starts = append(s.starts, start)
		if len(s.keys)-start > c.maxKey {
			s.keys = s.keys[:start]
			s.ends = append(s.ends, -1)
			s.shards = append(s.shards, 0)
			continue
		}
		s.ends = append(s.ends, len(s.keys))
		s.shards = append(s.shards, c.shards.Index(s.keys[start:]))
	}
}

// key returns check i's key; ends[i] must be ≥ 0.
func (s *scratch) key(i int) []byte { return s.keys[s.starts[i]:s.ends[i]] }

// lookup fills s.until and reports whether some check is known denied at
// now. It drops the entries it finds stale (expired, or for another
// limit).
func (c *Cache) lookup(s *scratch, checks []algo.Check, now int64) (denied bool) {
	s.until, s.never = s.until[:0], s.never[:0]
	for i := range checks {
		s.until, s.never = append(s.until, 0), append(s.never, false)
		if s.ends[i] < 0 {
			continue
		}
		ch := &checks[i]
		sh := c.shards.Shard(s.shards[i])
		k := s.key(i)
		sh.Mu.Lock()
		e, ok := sh.M[string(k)]
		switch {
		case !ok:
		case e.until <= now || e.limit != ch.Policy.Limit || e.burst != ch.Policy.Burst:
			delete(sh.M, string(k))
			c.size.Add(-1)
		case need(ch) >= e.hits:
			s.until[i], s.never[i] = e.until, e.never
			denied = true
		}
		sh.Mu.Unlock()
	}
	return denied
}

// need is the fewest hits that admitting ch takes: its Hits, but one for
// a take (algo.Check.Take), which is admitted when one hit fits and is
// denied exactly when one hit would be.
func need(ch *algo.Check) int64 {
	if ch.Take && ch.Hits > 0 {
		return 1
	}
	return max(ch.Hits, 0)
}

// answer builds the decisions of a request denied from the cache.
func answer(s *scratch, checks []algo.Check, now int64) []algo.Decision {
	out := make([]algo.Decision, len(checks))
	for i := range checks {
		if u := s.until[i]; u > 0 {
			// The counter's own reset is not kept; it is no sooner than
			// the cached wait.
			out[i] = algo.Decision{Allowed: false, Remaining: 0, ResetAfter: u - now, RetryAfter: u - now}
			if s.never[i] {
				out[i].RetryAfter = algo.Never
			}
			continue
		}
		out[i] = algo.Decision{Allowed: true, Remaining: checks[i].Policy.Capacity()}
	}
	return out
}

// record remembers that check i (ch) of hits is denied until until. An
// entry for the same limit that covers more requests (fewer hits) is kept;
// of two with equal hits the later until wins.
func (c *Cache) record(s *scratch, i int, ch algo.Check, until int64, never bool, now int64) {
	sh := c.shards.Shard(s.shards[i])
	k := s.key(i)
	ne := entry{limit: ch.Policy.Limit, burst: ch.Policy.Burst, hits: need(&ch), until: until, never: never}
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	if e, ok := sh.M[string(k)]; ok {
		if e.until > now && e.limit == ne.limit && e.burst == ne.burst {
			switch {
			case e.hits < ne.hits:
				return
			case e.hits == ne.hits:
				ne.until = max(ne.until, e.until)
			}
		}
		sh.M[string(k)] = ne
		return
	}
	if len(sh.M) >= c.perShard {
		c.evict(sh, now)
	}
	sh.M[string(k)] = ne
	c.size.Add(1)
}

// evict drops expired entries among a few sampled ones, or else the one
// expiring first (pkg/evict). The caller holds sh.Mu.
func (c *Cache) evict(sh *shardmap.Shard[entry], now int64) {
	dropped, evicted := evict.Sampled(sh.M,
		func(e entry) bool { return e.until <= now },
		func(e entry) int64 { return e.until }, nil, nil)
	if evicted {
		dropped = 1
		if c.evictC != nil {
			c.evictC.Inc()
		}
	}
	c.size.Add(int64(-dropped))
}

// Len returns the number of remembered denials, expired or not.
func (c *Cache) Len() int { return int(c.size.Load()) }

// Stats returns how many requests were denied from the cache (hits), went
// to the backend through the cache (misses) and went to it because they
// carried a refund (bypasses).
func (c *Cache) Stats() (hits, misses, bypasses uint64) {
	return c.hits.Load(), c.misses.Load(), c.bypasses.Load()
}

func count(n *atomic.Uint64, m prometheus.Counter) {
	n.Add(1)
	if m != nil {
		m.Inc()
	}
}

func (c *Cache) register(reg prometheus.Registerer) error {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_deny_cache_requests_total",
		Help: "Requests seen by the local deny cache: hit (denied locally, no backend call), miss (sent to the backend) or bypass (carried a refund).",
	}, []string{"result"})
	evictions := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "envoy_rls_deny_cache_evictions_total",
		Help: "Unexpired denials dropped from the full local deny cache.",
	})
	entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "envoy_rls_deny_cache_entries",
		Help: "Denials remembered by the local deny cache, expired ones not yet dropped included.",
	}, func() float64 { return float64(c.size.Load()) })
	for _, col := range []prometheus.Collector{requests, evictions, entries} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	c.hitC = requests.WithLabelValues("hit")
	c.missC = requests.WithLabelValues("miss")
	c.bypassC = requests.WithLabelValues("bypass")
	c.evictC = evictions
	return nil
}
