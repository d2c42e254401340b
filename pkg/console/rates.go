package console

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// Count is one limit's decisions so far with one code ("ok",
// "over_limit", "not_applied"), as the service's decision counters hold
// them (pkg/rls Metrics.Decisions).
type Count struct {
	topk.Key
	Code  string
	Total uint64
}

// RatesSeconds is how far back the rates go: five minutes, a second each.
const RatesSeconds = 300

// Rates samples cumulative decision counts once a second and keeps each
// limit's decisions per second over the last RatesSeconds. It counts
// nothing itself: it reads the counters the service keeps for its metrics,
// off the request path. Its memory is bounded by the number of limits the
// rules have (the counters' label sets), RatesSeconds × 12 bytes each.
type Rates struct {
	read func() []Count
	now  func() time.Time

	mu     sync.Mutex
	last   map[rateKey]uint64
	series map[topk.Key]*rateRing
	// sampled is when the last sample was taken; zero before the first.
	sampled time.Time
}

type rateKey struct {
	topk.Key
	code string
}

// rateRing is one limit's per-second counts, oldest first from next.
type rateRing struct {
	ok, over, notApplied [RatesSeconds]uint32
	next                 int
}

// NewRates returns a sampler of read; now is its clock (nil: time.Now).
func NewRates(read func() []Count, now func() time.Time) *Rates {
	if now == nil {
		now = time.Now
	}
	return &Rates{read: read, now: now, last: map[rateKey]uint64{}, series: map[topk.Key]*rateRing{}}
}

// Run samples once a second until ctx ends; it returns nil.
func (r *Rates) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	r.Sample()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Sample()
		}
	}
}

// Sample takes one sample: each limit's counts since the last sample
// become its newest second. The counters start with the process, as the
// sampler does, so a series not seen before counts from 0.
func (r *Rates) Sample() {
	// One limit and code can have several counters (a reload changed the
	// limit's algorithm or shadow mode): their sum is its count.
	totals := map[rateKey]uint64{}
	for _, c := range r.read() {
		totals[rateKey{c.Key, c.Code}] += c.Total
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sampled = r.now()
	for rk := range totals {
		if r.series[rk.Key] == nil {
			r.series[rk.Key] = &rateRing{}
		}
	}
	for k, s := range r.series {
		s.ok[s.next] = r.delta(totals, k, "ok")
		s.over[s.next] = r.delta(totals, k, "over_limit")
		s.notApplied[s.next] = r.delta(totals, k, "not_applied")
		s.next = (s.next + 1) % RatesSeconds
	}
}

// delta is k's count of code since the last sample, and keeps its total
// for the next. A series the last sample did not have was made by its
// first decision since then: it counted up from 0.
func (r *Rates) delta(totals map[rateKey]uint64, k topk.Key, code string) uint32 {
	rk := rateKey{k, code}
	cur, ok := totals[rk]
	if !ok {
		return 0
	}
	prev := r.last[rk]
	r.last[rk] = cur
	if cur < prev {
		return 0
	}
	return clamp(cur - prev)
}

func clamp(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }

// RatesView is the body of the console's rates: per limit, its decisions
// in each of the last RatesSeconds seconds, oldest first.
type RatesView struct {
	Seconds int          `json:"seconds"`
	Sampled time.Time    `json:"sampled"`
	Limits  []LimitRates `json:"limits"`
}

// LimitRates is one limit's decisions per second.
type LimitRates struct {
	topk.Key
	OK         []uint32 `json:"ok"`
	OverLimit  []uint32 `json:"over_limit"`
	NotApplied []uint32 `json:"not_applied"`
}

// View returns the rates, limits in key order.
func (r *Rates) View() RatesView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := RatesView{Seconds: RatesSeconds, Sampled: r.sampled.UTC(), Limits: make([]LimitRates, 0, len(r.series))}
	for k, s := range r.series {
		v.Limits = append(v.Limits, LimitRates{Key: k, OK: s.ordered(&s.ok), OverLimit: s.ordered(&s.over), NotApplied: s.ordered(&s.notApplied)})
	}
	slices.SortFunc(v.Limits, func(a, b LimitRates) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Limit, b.Limit))
	})
	return v
}

func (s *rateRing) ordered(a *[RatesSeconds]uint32) []uint32 {
	out := make([]uint32, 0, RatesSeconds)
	out = append(out, a[s.next:]...)
	return append(out, a[:s.next]...)
}
