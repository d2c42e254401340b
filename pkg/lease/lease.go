// Package lease is the local tier of the two-tier limiter (docs/architecture.md#layers): a
// backend layer that, for a counter running hot on this replica, takes a
// lease of k hits from the shared state in one script call and then
// answers up to k decisions on that counter in-process, with no Redis call.
//
// # Why it never over-admits
//
// A lease is granted by a take (algo.Check.Take): the shared state is
// debited the granted hits when the lease is granted, by the algorithm
// itself, so the shared state never admits more than its bound whatever the
// replicas do; the lease hits are admissions the shared state already
// counted. Hits the replica does not spend go back when the lease ends (its
// TTL, or the end of Run): a token_bucket or gcra refund moves the TAT back, never
// before now, so it cannot add capacity that was not taken. A fixed_window
// lease also ends at its window's end (as the grant reported it, measured
// from before the grant was sent, so never later than Redis's own end):
// its hits are never spent in a later window, and they are returned only
// while the window still has ReturnMargin to run, so that the refund lands
// in the window they were taken from; otherwise they are dropped and
// counted as expired; until the window's end such a lease stays spendable
// past its TTL, since spending it there is as safe as holding it. Dropped
// and unspent hits under-admit, bounded by the leases outstanding, and are
// measured.
//
// # When a counter leases
//
// Only checks whose rule says `lease: auto` (algo.Check.Lease), on an
// algorithm the table lets lease (algo.Spec.MayLease: fixed_window,
// token_bucket and gcra), consuming (not check-only, not a
// refund, not a take), in a request where no two checks share a counter.
// The counter must be hot: at least HotRPS hits per second seen here over
// the last TTL. The lease size is min(local rate × TTL, MaxFraction × the
// shared remaining last reported), taken only when that is at least 2: near
// the limit leases shrink to nothing and decisions go to the shared state,
// exact as without this layer. Cold counters never lease; a workload of
// random keys goes to the next backend as before (and tracking each key
// costs a map entry, bounded by MaxKeys).
//
// A lease is taken by the request that finds the counter hot and without
// one, in its own call to the next backend: its one hit and the lease are
// one take of k+1, all or nothing with the request's other checks.
//
// # What a leased decision reports
//
// Allowed, with Remaining = min(hits left in the lease, the shared
// remaining the grant reported): never more than the shared state held.
// ResetAfter counts down from the grant's.
//
// lease must not import any backend, pkg/rls or gRPC: it consumes the
// Backend it declares. It never reads counter state other than through
// Apply decisions.
package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/shardmap"
)

// Backend is the next layer: the backend layer contract, algo.Applier.
type Backend = algo.Applier

// Defaults for Options.
const (
	DefaultTTL          = 200 * time.Millisecond
	DefaultHotRPS       = 100
	DefaultMaxFraction  = 0.1
	DefaultMaxKeys      = 100_000
	DefaultReturnMargin = time.Second
	DefaultReturnWait   = time.Second
)

// Options configures a Layer. The zero value uses the defaults.
type Options struct {
	// TTL is how long a lease lives, and the window over which a counter's
	// local rate is measured.
	TTL time.Duration
	// HotRPS is the local rate (hits per second) from which a counter may
	// lease.
	HotRPS float64
	// MaxFraction (0 < f ≤ 1) is the largest share of the shared remaining
	// one lease may take, so that replicas share what is left.
	MaxFraction float64
	// MaxKeys bounds the counters tracked; past it new counters are not
	// tracked (they stay cold) until idle ones are dropped.
	MaxKeys int
	// ReturnMargin: a fixed_window lease's unused hits are returned only
	// while at least this much of its window remains, so that the refund
	// reaches Redis within the window; otherwise they are dropped. It
	// must exceed the time a Redis call can take.
	ReturnMargin time.Duration
	// ReturnWait bounds each return call to the backend.
	ReturnWait time.Duration
	// Now is the clock of the sweeper (Run); nil means time.Now.
	// Apply uses the time it is given.
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Validate reports what is wrong with o's explicit values.
func (o Options) Validate() error {
	var errs []error
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("lease: ttl %v (want > 0)", o.TTL))
	}
	if o.HotRPS < 0 {
		errs = append(errs, fmt.Errorf("lease: hot rps %v (want ≥ 0)", o.HotRPS))
	}
	if o.MaxFraction < 0 || o.MaxFraction > 1 {
		errs = append(errs, fmt.Errorf("lease: max fraction %v (want 0 < f ≤ 1)", o.MaxFraction))
	}
	if o.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("lease: max keys %d (want ≥ 0)", o.MaxKeys))
	}
	return errors.Join(errs...)
}

// Layer is a Backend that serves hot counters from leases and passes
// everything else to the backend it wraps. It is safe for concurrent use.
// Run runs its sweeper and, when it ends, returns the leases it holds.
type Layer struct {
	next   Backend
	opts   Options
	ttl    int64 // µs
	margin int64 // µs
	shards shardmap.Map[*entry]
	size   atomic.Int64
	bufs   sync.Pool
	log    *zap.Logger

	granted, local, returned, expired atomic.Uint64
	grantedC, localC, returnedC       prometheus.Counter
	expiredC                          prometheus.Counter
}

// entry is one counter's local state. Its fields are guarded by its
// shard's lock.
type entry struct {
	// Hotness: hits seen since winStart (local µs), and the rate measured
	// over the window before.
	winStart int64
	seen     int64
	rate     float64 // hits per second
	lastSeen int64

	// shared is the remaining the shared state last reported; -1 unknown.
	shared int64

	// The lease: left hits until expires (local µs; 0: none).
	left    int64
	expires int64
	resetAt int64 // local µs at which the grant's ResetAfter ends
	// window marks a fixed_window lease, whose unused hits may be
	// returned only before windowEnd − margin.
	window    bool
	windowEnd int64
	// ended holds the unused hits of leases that ended (past their TTL,
	// not fixed_window) before the sweeper returned them; it returns them.
	ended    int64
	taking   bool       // a take is in flight for this counter
	gen      uint64     // counts the leases granted, to tell them apart
	check    algo.Check // owned copy, for returns
	hasCheck bool
}

// scratch is one Apply's working memory, pooled.
type scratch struct {
	keys         []byte
	starts, ends []int
	kind         []uint8  // per check: passNext, served, taking, tracked
	reserved     []int64  // served: the hits taken from the lease; taking: the take's hits
	gen          []uint64 // served: the lease they were taken from
	rest         []algo.Check
	restIdx      []int
}

const (
	passNext uint8 = iota
	served
	taking
	tracked // goes to next, but its decision updates the entry
)

// New returns a Layer in front of next. Run its sweeper with Run, whose
// end at shutdown returns the leases held.
func New(next Backend, opts Options) (*Layer, error) {
	if next == nil {
		return nil, errors.New("lease: New: nil backend")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.TTL = cmp.Or(opts.TTL, DefaultTTL)
	opts.HotRPS = cmp.Or(opts.HotRPS, DefaultHotRPS)
	opts.MaxFraction = cmp.Or(opts.MaxFraction, DefaultMaxFraction)
	opts.MaxKeys = cmp.Or(opts.MaxKeys, DefaultMaxKeys)
	opts.ReturnMargin = cmp.Or(opts.ReturnMargin, DefaultReturnMargin)
	opts.ReturnWait = cmp.Or(opts.ReturnWait, DefaultReturnWait)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	l := &Layer{
		next: next, opts: opts, ttl: opts.TTL.Microseconds(), margin: opts.ReturnMargin.Microseconds(),
		log: opts.Logger.Named("lease"),
	}
	l.shards.Init()
	l.bufs.New = func() any { return new(scratch) }
	if opts.Registerer != nil {
		if err := l.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
	}
	return l, nil
}

// leasable reports whether c may be served from a lease.
func leasable(c *algo.Check) bool {
	// A charge must reach the shared state whole, past the limit too.
	if !c.Lease || c.Refund || c.Take || c.Charge || c.Hits <= 0 {
		return false
	}
	spec, _ := c.Policy.Algorithm.Spec()
	return spec.MayLease && c.Policy.Limit > 0
}

// Every backend layer implements the one contract.
var _ algo.Applier = (*Layer)(nil)

// Apply implements algo.Applier (the contract is stated there; how a lease
// keeps it is in the package comment).
func (l *Layer) Apply(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	some := false
	for i := range checks {
		if leasable(&checks[i]) {
			some = true
			break
		}
	}
	if !some || algo.SharedCounters(checks) {
		return l.next.Apply(ctx, at, checks)
	}
	now := at.UnixMicro()
	s := l.bufs.Get().(*scratch)
	defer func() {
		// The copies hold the caller's entries; a pooled scratch must not
		// keep them alive.
		clear(s.rest)
		l.bufs.Put(s)
	}()
	s.keys, s.starts, s.ends = s.keys[:0], s.starts[:0], s.ends[:0]
	s.kind, s.reserved, s.gen = s.kind[:0], s.reserved[:0], s.gen[:0]
	s.rest, s.restIdx = s.rest[:0], s.restIdx[:0]

	out := make([]algo.Decision, len(checks))
	l.plan(s, checks, now, out)
	if len(s.rest) == 0 {
		l.countLocal(uint64(len(checks)))
		return out, nil
	}
	d, err := l.next.Apply(ctx, at, s.rest)
	if err == nil && len(d) != len(s.rest) {
		err = fmt.Errorf("lease: backend returned %d decisions for %d checks", len(d), len(s.rest))
	}
	allowed := err == nil
	if err == nil {
		for j, i := range s.restIdx {
			out[i] = d[j]
			if !d[j].Allowed && !checks[i].Refund {
				allowed = false
			}
		}
	}
	l.finish(s, checks, now, out, allowed, err == nil)
	if err != nil {
		return nil, err
	}
	for i := range checks {
		if s.kind[i] == taking && out[i].Allowed {
			// The request's own hit came out of the take; what the
			// shared state reported is after the whole take.
			out[i].Granted = 0
		}
	}
	return out, nil
}

// plan reserves each leasable check's hits from its lease (out gets the
// decisions of the checks a lease serves) and puts every other check, a
// take for one that starts a lease, in s.rest for the next backend.
func (l *Layer) plan(s *scratch, checks []algo.Check, now int64, out []algo.Decision) {
	for i := range checks {
		c := &checks[i]
		start := len(s.keys)
		kind, res, gen := passNext, int64(0), uint64(0)
		if leasable(c) {
			s.keys = c.AppendIdentity(s.keys)
			kind, res, gen = l.reserve(s.keys[start:], c, now, &out[i])
		}
		s.starts, s.ends = append(s.starts, start), append(s.ends, len(s.keys))
		s.kind, s.reserved, s.gen = append(s.kind, kind), append(s.reserved, res), append(s.gen, gen)
		if kind == served {
			continue
		}
		rc := *c
		if kind == taking {
			rc.Take, rc.Hits = true, res
		}
		s.rest, s.restIdx = append(s.rest, rc), append(s.restIdx, i)
	}
}

// finish settles every check after the next backend answered (decided
// says it did): leased hits of a denied request go back into their lease,
// takes and tracked counters record what the shared state reported.
func (l *Layer) finish(s *scratch, checks []algo.Check, now int64, out []algo.Decision, allowed, decided bool) {
	var nlocal uint64
	for i := range checks {
		switch s.kind[i] {
		case served:
			if allowed {
				nlocal++
			} else {
				l.unreserve(s, i)
			}
		case taking, tracked:
			l.settle(s, i, &checks[i], now, out[i], decided)
		}
	}
	l.countLocal(nlocal)
}

// countLocal counts n decisions answered from leases.
func (l *Layer) countLocal(n uint64) {
	if n == 0 {
		return
	}
	l.local.Add(n)
	if l.localC != nil {
		l.localC.Add(float64(n))
	}
}

func (s *scratch) key(i int) []byte { return s.keys[s.starts[i]:s.ends[i]] }

// reserve notes c's hits on its counter's entry and either serves c from
// the lease (served, writing *d), asks for a lease (taking, with the take's
// hits), or lets it through (tracked, or passNext when untracked).
func (l *Layer) reserve(key []byte, c *algo.Check, now int64, d *algo.Decision) (kind uint8, hits int64, gen uint64) {
	sh := l.shards.For(key)
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	e := sh.M[string(key)]
	if e == nil {
		if l.size.Load() >= int64(l.opts.MaxKeys) {
			return passNext, 0, 0
		}
		e = &entry{winStart: now, shared: -1}
		sh.M[string(key)] = e
		l.size.Add(1)
	}
	e.lastSeen = now
	if el := now - e.winStart; el >= l.ttl {
		e.rate = float64(e.seen) * 1e6 / float64(el)
		e.winStart, e.seen = now, 0
	}
	e.seen += c.Hits
	// A lease serves only the policy it was granted under: after a reload
	// or with a request's own limit override the counter goes to Redis.
	if e.expires > now && e.left >= c.Hits && e.check.Policy == c.Policy {
		e.left -= c.Hits
		*d = algo.Decision{Allowed: true, Remaining: max(min(e.left, e.shared), 0), ResetAfter: max(e.resetAt-now, 0)}
		return served, c.Hits, e.gen
	}
	if e.left > 0 && e.expires <= now && !e.window {
		// The lease ended with hits left. They wait for the sweeper's
		// return apart, so that the counter may lease again now rather
		// than send its traffic to the shared state until the next sweep
		// (up to TTL/2 of it per lease).
		e.ended += e.left
		e.left = 0
	}
	// A new lease needs the request to cost one hit (its take must admit
	// exactly when the exact check would), the counter to be hot, and
	// the last lease to be spent or swept (the sweeper returns what is
	// left of an ended one).
	// The hits seen in the current window already show at least
	// seen/TTL, so a counter that turns hot leases within its first TTL.
	rate := max(e.rate, float64(e.seen)*1e6/float64(l.ttl))
	if e.taking || c.Hits != 1 || rate < l.opts.HotRPS || e.shared < 0 || e.left > 0 {
		return tracked, 0, 0
	}
	k := min(int64(rate*l.opts.TTL.Seconds()), int64(l.opts.MaxFraction*float64(e.shared)))
	if k < 2 {
		return tracked, 0, 0
	}
	e.taking = true
	return taking, k + 1, 0
}

// unreserve puts back the hits a denied or failed request took from a
// lease, if that lease is still the counter's and has not ended: hits of
// another lease (a fixed window's past window, say) must never be spent.
// Otherwise they count as expired.
func (l *Layer) unreserve(s *scratch, i int) {
	key := s.key(i)
	sh := l.shards.For(key)
	sh.Mu.Lock()
	e := sh.M[string(key)]
	back := e != nil && e.gen == s.gen[i] && e.expires > 0
	if back {
		e.left += s.reserved[i]
	}
	sh.Mu.Unlock()
	if !back {
		l.countExpired(s.reserved[i])
	}
}

// settle records what the next backend said about check i: the shared
// remaining, and for a take the lease it granted.
func (l *Layer) settle(s *scratch, i int, c *algo.Check, now int64, d algo.Decision, ok bool) {
	key := s.key(i)
	sh := l.shards.For(key)
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	e := sh.M[string(key)]
	if e == nil {
		return
	}
	if s.kind[i] == taking {
		e.taking = false
	}
	if !ok {
		return
	}
	e.shared = d.Remaining
	if s.kind[i] != taking || !d.Allowed || d.Granted <= 1 {
		return
	}
	l.granted.Add(1)
	if l.grantedC != nil {
		l.grantedC.Inc()
	}
	e.gen++
	// now is from before the grant was sent, so now + ResetAfter is never
	// later than the window's end as Redis counts it.
	e.left = d.Granted - 1
	e.expires = now + l.ttl
	e.resetAt = now + d.ResetAfter
	spec, _ := c.Policy.Algorithm.Spec()
	e.window = spec.Shape == algo.ShapeWindow // fixed_window: the lease ends with the window
	if e.window {
		e.windowEnd = now + d.ResetAfter
		e.expires = min(e.expires, e.windowEnd)
	}
	// The entry's key is c's counter identity, so the copy names the
	// same counter; the policy may have changed with a reload.
	if !e.hasCheck {
		e.check, e.hasCheck = *c, true
		e.check.Entries = slices.Clone(c.Entries)
	}
	e.check.Policy = c.Policy
}

// Run sweeps every TTL/2, returning ended leases and forgetting idle
// counters, until ctx ends; then it returns every lease held, ended or
// not, and returns nil. Run it once. Apply must not be called after Run
// returned: a lease taken then would never go back (the service stops
// serving before it ends Run).
func (l *Layer) Run(ctx context.Context) error {
	tick := time.NewTicker(max(l.opts.TTL/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Sweep(true)
			return nil
		case <-tick.C:
			l.Sweep(false)
		}
	}
}

// ret is one lease to return.
type ret struct {
	check algo.Check
	hits  int64
}

// Sweep returns the leases that have ended (all of them with all set),
// counts the fixed_window hits that can no longer be returned safely as
// expired, and forgets counters idle for a few TTLs. Run calls it;
// tests may too.
func (l *Layer) Sweep(all bool) {
	now := l.opts.Now().UnixMicro()
	var rets []ret
	var dropped int64
	for i := range shardmap.Count {
		sh := l.shards.Shard(i)
		sh.Mu.Lock()
		for k, e := range sh.M {
			if e.ended > 0 {
				rets = append(rets, ret{check: e.check, hits: e.ended})
				e.ended = 0
			}
			if e.left > 0 && (all || e.expires <= now) {
				switch {
				case !e.window || now < e.windowEnd-l.margin:
					rets = append(rets, ret{check: e.check, hits: e.left})
				case !all && now < e.windowEnd:
					// Too late in its window to return safely, but its
					// hits may still be spent in it: keep it until the
					// window ends rather than lose them now.
					e.expires = e.windowEnd
					continue
				default:
					dropped += e.left
				}
				e.left, e.expires = 0, 0
			} else if e.left == 0 && e.expires <= now {
				e.expires = 0
			}
			if e.expires == 0 && !e.taking && now-e.lastSeen > 4*l.ttl {
				delete(sh.M, k)
				l.size.Add(-1)
			}
		}
		sh.Mu.Unlock()
	}
	l.countExpired(dropped)
	for _, r := range rets {
		l.giveBack(r, now)
	}
}

func (l *Layer) countExpired(n int64) {
	if n <= 0 {
		return
	}
	l.expired.Add(uint64(n))
	if l.expiredC != nil {
		l.expiredC.Add(float64(n))
	}
}

// giveBack refunds one lease's unused hits to the shared state.
func (l *Layer) giveBack(r ret, now int64) {
	c := r.check
	c.Hits, c.Refund, c.Take = r.hits, true, false
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.ReturnWait)
	defer cancel()
	if _, err := l.next.Apply(ctx, time.UnixMicro(now), []algo.Check{c}); err != nil {
		// The hits stay debited until the counter's state expires: an
		// under-admission, counted as expired.
		l.log.Warn("returning a lease failed; its hits count as expired", zap.Int64("hits", r.hits), zap.Error(err))
		l.countExpired(r.hits)
		return
	}
	l.returned.Add(uint64(r.hits))
	if l.returnedC != nil {
		l.returnedC.Add(float64(r.hits))
	}
}

// Stats is what a Layer has done since New.
type Stats struct {
	// Granted counts leases taken; Local, decisions answered from a
	// lease; Returned, unused hits given back; Expired, unused hits that
	// could not be given back (a fixed_window lease past its window, or
	// a failed return).
	Granted, Local, Returned, Expired uint64
}

// Stats returns the counts so far.
func (l *Layer) Stats() Stats {
	return Stats{Granted: l.granted.Load(), Local: l.local.Load(), Returned: l.returned.Load(), Expired: l.expired.Load()}
}

func (l *Layer) register(reg prometheus.Registerer) error {
	mk := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	l.grantedC = mk("envoy_rls_lease_granted_total", "Leases taken from the shared state by this replica.")
	l.localC = mk("envoy_rls_lease_local_decisions_total", "Decisions answered from a lease, with no backend call.")
	l.returnedC = mk("envoy_rls_lease_hits_returned_total", "Unused lease hits given back to the shared state.")
	l.expiredC = mk("envoy_rls_lease_hits_expired_total", "Unused lease hits that could not be given back (a fixed window past its end, or a failed return): the measured under-admission.")
	for _, c := range []prometheus.Collector{l.grantedC, l.localC, l.returnedC, l.expiredC} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
