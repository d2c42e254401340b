package override

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// DefaultRefresh is how often a Table re-reads its store: twice a second,
// so a change made on one replica is in force on every replica within 1 s.
const DefaultRefresh = 500 * time.Millisecond

// Config configures a Table.
type Config struct {
	// Store holds the overrides; required.
	Store Store
	// Refresh is how often Run re-reads the store; zero means DefaultRefresh.
	Refresh time.Duration
	// MaxTTL is the longest TTL Set accepts; zero means DefaultMaxTTL.
	MaxTTL time.Duration
	// Logger receives every change; it is named "override". Nil discards.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Table applies the stored overrides. Its AdjustLimit (a pkg/rls
// LimitAdjuster) answers from an in-memory index swapped atomically by
// Refresh, so the request path never waits for the store. It is safe for
// concurrent use.
type Table struct {
	cfg     Config
	log     *zap.Logger
	cur     atomic.Pointer[index]
	changes *prometheus.CounterVec
	errs    prometheus.Counter
	// mu serialises refreshes, so expiries are logged once per replica.
	mu sync.Mutex
}

// index is one refresh's overrides by domain and target. domains lets a
// request of a domain without overrides return before its limit's target
// name is built (a concatenation for one of several unnamed limits).
type index struct {
	by      map[target]slots
	domains map[string]bool
}

type target struct{ domain, limit string }

// slots holds a target's overrides by source.
type slots struct{ manual, adaptive *Override }

// New returns a Table over cfg.Store. Its index is empty until the first
// Refresh.
func New(cfg Config) (*Table, error) {
	if cfg.Store == nil {
		return nil, errors.New("override: New: nil Store")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := zap.NewNop()
	if cfg.Logger != nil {
		log = cfg.Logger.Named("override")
	}
	t := &Table{
		cfg: cfg,
		log: log,
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_override_changes_total",
			Help: "Runtime limit override changes, by action (set, clear, expire) and source (manual, adaptive).",
		}, []string{"action", "source"}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_override_refresh_errors_total",
			Help: "Failed reads of the override store; the overrides last read stay in force.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{t.changes, t.errs, newActiveCollector(t)} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("override: register metrics: %w", err)
			}
		}
	}
	t.cur.Store(&index{})
	return t, nil
}

// String names the adjuster where a limit's source is shown (explain).
func (t *Table) String() string { return "runtime override" }

// AdjustLimit implements pkg/rls's LimitAdjuster: the live manual override
// of l, else its live adaptive one, applied to p.
func (t *Table) AdjustLimit(now time.Time, domain string, r *rules.Rule, l *rules.Limit, p algo.Policy) algo.Policy {
	ix := t.cur.Load()
	if !ix.domains[domain] {
		return p
	}
	if o := ix.lookup(domain, Target(r, l), now); o != nil {
		return o.Apply(p)
	}
	return p
}

// Lookup returns the override in force on limit l of rule r in domain at
// now, or nil.
func (t *Table) Lookup(now time.Time, domain string, r *rules.Rule, l *rules.Limit) *Override {
	return t.cur.Load().lookup(domain, Target(r, l), now)
}

func (ix *index) lookup(domain, limit string, now time.Time) *Override {
	s, ok := ix.by[target{domain, limit}]
	if !ok {
		return nil
	}
	if s.manual != nil && s.manual.live(now) {
		return s.manual
	}
	if s.adaptive != nil && s.adaptive.live(now) {
		return s.adaptive
	}
	return nil
}

// Run refreshes the index every Refresh until ctx ends. A failed read
// keeps the last index in force; every failure is counted, but only the
// first of a run of them is logged (and the recovery), so a Redis outage
// does not log twice a second. It returns nil.
func (t *Table) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.Refresh)
	defer tick.Stop()
	failing := false
	for {
		err := t.Refresh(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			t.log.Warn("override refresh failed; keeping the overrides last read", zap.Error(err))
		case err == nil && failing:
			t.log.Info("override refresh recovered")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Refresh reads the store into the index now, and logs and counts every
// override that expired since the last read.
func (t *Table) Refresh(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	all, err := t.cfg.Store.Load(ctx)
	if err != nil {
		t.errs.Inc()
		return err
	}
	now := t.cfg.Now()
	next := &index{by: make(map[target]slots, len(all)), domains: map[string]bool{}}
	for i := range all {
		o := &all[i]
		if !o.live(now) {
			continue
		}
		k := target{o.Domain, o.Limit}
		s := next.by[k]
		if o.Source == Adaptive {
			s.adaptive = o
		} else {
			s.manual = o
		}
		next.by[k] = s
		next.domains[o.Domain] = true
	}
	prev := t.cur.Swap(next)
	for k, s := range prev.by {
		for _, o := range []*Override{s.manual, s.adaptive} {
			if o != nil && !o.live(now) && next.lookupSource(k, o.Source) == nil {
				t.changes.WithLabelValues("expire", string(o.Source)).Inc()
				t.log.Info("override expired", logFields(o)...)
			}
		}
	}
	return nil
}

func (ix *index) lookupSource(k target, src Source) *Override {
	s := ix.by[k]
	if src == Adaptive {
		return s.adaptive
	}
	return s.manual
}

// Set validates o, stamps it with now and now+ttl, stores it, logs and
// counts it, and refreshes the index so this replica applies it at once.
func (t *Table) Set(ctx context.Context, o Override, ttl time.Duration) (Override, error) {
	if ttl <= 0 || ttl > t.cfg.MaxTTL {
		return o, fmt.Errorf("override: %w: ttl: %v (want above 0 and at most %v: an override must expire by itself)", errInvalid, ttl, t.cfg.MaxTTL)
	}
	if err := o.check(); err != nil {
		return o, fmt.Errorf("override: %w: %w", errInvalid, err)
	}
	o.SetAt = t.cfg.Now().UTC()
	o.Expires = o.SetAt.Add(ttl)
	if err := t.cfg.Store.Put(ctx, o); err != nil {
		return o, err
	}
	t.changes.WithLabelValues("set", string(o.Source)).Inc()
	t.log.Info("override set", logFields(&o)...)
	return o, t.prune(ctx)
}

// errInvalid marks a request the caller must correct, as opposed to a
// store failure.
var errInvalid = errors.New("invalid request")

// Filter selects overrides for Clear; an empty field matches any value.
type Filter struct {
	Domain string
	Limit  string
	Source Source
}

func (f Filter) match(o *Override) bool {
	return (f.Domain == "" || f.Domain == o.Domain) && (f.Limit == "" || f.Limit == o.Limit) && (f.Source == "" || f.Source == o.Source)
}

// Clear removes the live overrides f selects, logging each with by and
// reason, and returns them.
func (t *Table) Clear(ctx context.Context, f Filter, by, reason string) ([]Override, error) {
	if reason == "" {
		return nil, fmt.Errorf("override: %w: reason: empty (every change is logged with its reason)", errInvalid)
	}
	live, err := t.List(ctx)
	if err != nil {
		return nil, err
	}
	var gone []Override
	var ids []ID
	for i := range live {
		if f.match(&live[i]) {
			gone = append(gone, live[i])
			ids = append(ids, live[i].ID())
		}
	}
	if err := t.cfg.Store.Delete(ctx, ids...); err != nil {
		return nil, err
	}
	for i := range gone {
		t.changes.WithLabelValues("clear", string(gone[i].Source)).Inc()
		t.log.Info("override cleared", append(logFields(&gone[i]), zap.String("cleared_by", by), zap.String("clear_reason", reason))...)
	}
	return gone, t.prune(ctx)
}

// List returns the live overrides as the store has them now, ordered by
// domain, limit and source.
func (t *Table) List(ctx context.Context) ([]Override, error) {
	all, err := t.cfg.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	now := t.cfg.Now()
	live := all[:0]
	for _, o := range all {
		if o.live(now) {
			live = append(live, o)
		}
	}
	sort.Slice(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		if a.Limit != b.Limit {
			return a.Limit < b.Limit
		}
		return a.Source < b.Source
	})
	return live, nil
}

// Lock takes a store-wide lock for ttl; see Store.Lock.
func (t *Table) Lock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	return t.cfg.Store.Lock(ctx, name, ttl)
}

// prune deletes the expired entries from the store, so it does not grow
// with every incident, and refreshes the index.
func (t *Table) prune(ctx context.Context) error {
	all, err := t.cfg.Store.Load(ctx)
	if err != nil {
		return err
	}
	now := t.cfg.Now()
	var dead []ID
	for i := range all {
		if !all[i].live(now) {
			dead = append(dead, all[i].ID())
		}
	}
	if err := t.cfg.Store.Delete(ctx, dead...); err != nil {
		return err
	}
	return t.Refresh(ctx)
}

func logFields(o *Override) []zap.Field {
	f := []zap.Field{
		zap.String("domain", o.Domain), zap.String("limit", o.Limit), zap.String("source", string(o.Source)),
		zap.String("reason", o.Reason), zap.String("by", o.By), zap.Time("expires", o.Expires),
	}
	if o.RequestsPerUnit != nil {
		return append(f, zap.Uint32("requests_per_unit", *o.RequestsPerUnit))
	}
	return append(f, zap.Float64("factor", o.Factor))
}
