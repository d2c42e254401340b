// Package warmup ramps limits that have a `warmup:` block (rules.Warmup):
// it is an rls.LimitAdjuster whose effective limit grows smoothly from
// From × the limit to the limit over the ramp's period.
//
// A ramp starts at its fixed Start, or, without one, when its limit first
// appeared or last changed. That moment is the ramp's anchor. It must be
// the same on every replica, or each would admit by its own ramp: with
// Redis it is kept there (RedisAnchors: set once to Redis TIME, read back
// by every replica); on the in-process store it is the first request that
// saw the limit.
//
// AdjustLimit runs on the request path, never blocks and starts no
// goroutine: an anchor not known yet is queued for Run, which fetches it,
// and until it is known the limit is the ramp's start, From × the limit,
// which never admits more than any replica that knows the anchor. The package reads and writes its anchor keys only;
// it must not touch counters or any other key.
package warmup

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Anchors keeps ramp anchors that replicas share. Implementations must be
// safe for concurrent use.
type Anchors interface {
	// Anchor returns the start of the ramp named by anchor
	// (rules.Warmup.Anchor) in domain. When none is stored it stores known,
	// or the store's own clock when known is zero, and returns what it
	// stored. Either way the anchor is kept for at least ttl from now.
	Anchor(ctx context.Context, domain, anchor string, known time.Time, ttl time.Duration) (time.Time, error)
}

// Options configures an Adjuster. The zero value anchors in-process.
type Options struct {
	// Anchors is where replicas share anchors; nil anchors each ramp in
	// this process (the in-process store's case, where there is one
	// replica's worth of state anyway).
	Anchors Anchors
	// Timeout bounds one background fetch; zero means one second.
	Timeout time.Duration
	// Retry is how long after a failed fetch the next may start; zero
	// means one second.
	Retry time.Duration
	// Refresh is how often a known anchor is fetched again, which renews
	// its TTL while the limit is in use and restores it if Redis lost it;
	// zero means an hour.
	Refresh time.Duration
	// Logger receives fetch failures; it is named "warmup". Nil discards.
	Logger *zap.Logger
}

// anchorGrace is how long an anchor outlives its ramp in the store. An
// anchor that expired while its limit was still loaded would start the
// ramp again on a replica that fetched it anew; Refresh renews the TTL of
// anchors in use long before.
const anchorGrace = 24 * time.Hour

// fetchQueue bounds the anchors waiting for Run. A ramp is queued at most
// once at a time (ramp.busy), so the queue fills only with more ramps
// than this waiting at once; one that finds it full is queued again by a
// later request.
const fetchQueue = 256

// Adjuster applies warm-up ramps. It is safe for concurrent use; see
// AdjustLimit. With shared Anchors, Run must run for ramps to leave their
// start.
type Adjuster struct {
	opts Options
	// fetches are the anchors AdjustLimit asked Run to fetch: the request
	// path starts no goroutine.
	fetches chan fetch
	log     *zap.Logger
	// ramps holds one *ramp per rules.Warmup.Anchor seen. A reload that
	// changes a ramped limit adds one; the old ones stay, a few words each.
	ramps sync.Map
}

// ramp is what this process knows of one anchor.
type ramp struct {
	// start is the anchor in Unix µs, 0 while unknown.
	start atomic.Int64
	// busy is set while a fetch runs, so that one runs at a time.
	busy atomic.Bool
	// next is when (UnixNano, request clock) the next fetch may start.
	next atomic.Int64
	// failing says the last fetch failed, so failures log once.
	failing atomic.Bool
}

// fetch is one anchor to read (or set) in the shared store.
type fetch struct {
	r      *ramp
	now    time.Time
	domain string
	w      *rules.Warmup
}

// New returns an Adjuster; with shared Anchors, Run fetches them.
func New(opts Options) *Adjuster {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	if opts.Refresh <= 0 {
		opts.Refresh = time.Hour
	}
	log := zap.NewNop()
	if opts.Logger != nil {
		log = opts.Logger.Named("warmup")
	}
	return &Adjuster{opts: opts, log: log, fetches: make(chan fetch, fetchQueue)}
}

// Run fetches the anchors AdjustLimit queues, one at a time, until ctx
// ends. It returns nil.
func (a *Adjuster) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-a.fetches:
			a.fetch(ctx, f.r, f.now, f.domain, f.w)
		}
	}
}

// String names the adjuster where a limit's source is shown (explain).
func (a *Adjuster) String() string { return "warm-up" }

// AdjustLimit implements rls.LimitAdjuster: it scales p's limit and burst
// by the ramp's fraction at now (Fraction). Limits without a warmup block,
// and limits of 0, are returned as they are.
func (a *Adjuster) AdjustLimit(now time.Time, domain string, _ *rules.Rule, l *rules.Limit, p algo.Policy) algo.Policy {
	w := l.Warmup
	if w == nil || p.Limit == 0 {
		return p
	}
	start := w.Start
	if start.IsZero() {
		var known bool
		if start, known = a.anchor(now, domain, w); !known {
			return Scale(p, w.From)
		}
	}
	return Scale(p, Fraction(w, now.Sub(start)))
}

// anchor returns w's anchor, when known; it starts a fetch when one is due.
func (a *Adjuster) anchor(now time.Time, domain string, w *rules.Warmup) (time.Time, bool) {
	v, ok := a.ramps.Load(w.Anchor)
	if !ok {
		v, _ = a.ramps.LoadOrStore(w.Anchor, &ramp{})
	}
	r := v.(*ramp)
	if a.opts.Anchors == nil {
		// First sight anchors it; max keeps a clock at the epoch from
		// reading as "unknown".
		r.start.CompareAndSwap(0, max(now.UnixMicro(), 1))
		return time.UnixMicro(r.start.Load()), true
	}
	if now.UnixNano() >= r.next.Load() && r.busy.CompareAndSwap(false, true) {
		select {
		case a.fetches <- fetch{r, now, domain, w}:
		default:
			r.busy.Store(false) // full: a later request queues it
		}
	}
	us := r.start.Load()
	return time.UnixMicro(us), us != 0
}

// fetch reads (or sets) r's anchor in the shared store.
func (a *Adjuster) fetch(ctx context.Context, r *ramp, now time.Time, domain string, w *rules.Warmup) {
	defer r.busy.Store(false)
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	var known time.Time
	if us := r.start.Load(); us != 0 {
		known = time.UnixMicro(us)
	}
	start, err := a.opts.Anchors.Anchor(ctx, domain, w.Anchor, known, w.Period+anchorGrace)
	if err != nil {
		r.next.Store(now.Add(a.opts.Retry).UnixNano())
		if !r.failing.Swap(true) {
			a.log.Warn("warm-up anchor unavailable; the ramp holds at its start until it is",
				zap.String("domain", domain), zap.Error(err))
		}
		return
	}
	r.failing.Store(false)
	r.start.Store(max(start.UnixMicro(), 1))
	r.next.Store(now.Add(a.opts.Refresh).UnixNano())
}

// Fraction is the share of the limit w allows elapsed after the ramp's
// start: From until the start, growing linearly to 1 at the period's end,
// 1 after.
func Fraction(w *rules.Warmup, elapsed time.Duration) float64 {
	switch {
	case elapsed <= 0:
		return w.From
	case elapsed >= w.Period:
		return 1
	}
	return w.From + (1-w.From)*float64(elapsed)/float64(w.Period)
}

// Scale returns p with its limit and burst times f, rounded down (a ramp
// must never admit more than its bound) but at least 1: a limit that is not
// 0 never becomes a block.
func Scale(p algo.Policy, f float64) algo.Policy {
	if f >= 1 {
		return p
	}
	scale := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, int64(math.Floor(float64(v)*f)))
	}
	p.Limit, p.Burst = scale(p.Limit), scale(p.Burst)
	return p
}
