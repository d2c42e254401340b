package algo

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/randsteps"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// testPeriods mixes whole and odd periods, and periods above 2^20 µs where
// sliding_window weighs in steps of more than 1 µs.
var testPeriods = []int64{7, 1000, 999_983, Second, 7*Second + 3, Minute, Hour}

func randPolicy(r *rand.Rand, a Algorithm) Policy {
	limits := []int64{1, 2, 3, 7, 10, 64, 100, 1 + r.Int64N(1000)}
	p := Policy{Algorithm: a, Limit: limits[r.IntN(len(limits))], Period: testPeriods[r.IntN(len(testPeriods))]}
	if (a == TokenBucket || a == GCRA) && r.IntN(2) == 0 {
		p.Burst = 1 + r.Int64N(3*p.Limit)
	}
	if a == SlidingWindow {
		p.SubWindows = randSubWindows(r, p.Period)
	}
	return p
}

// randSubWindows draws a sliding window's sub-window count for period:
// half the time none (the two-window estimate), else 1..MaxSubWindows,
// often the default, never more than the period's µs.
func randSubWindows(r *rand.Rand, period int64) int64 {
	subs := []int64{0, 0, 0, 1, 2, 3, 7, DefaultSubWindows, DefaultSubWindows, MaxSubWindows}
	return min(subs[r.IntN(len(subs))], period)
}

type event struct {
	now, hits int64
	refund    bool
	before    State
	after     State
	d         Decision
}

// simulate runs n random steps; refunds only when withRefunds.
func simulate(p Policy, r *rand.Rand, n int, withRefunds bool) []event {
	var s State
	now := t0 + r.Int64N(10*Second)
	evs := make([]event, 0, n)
	for range n {
		now += randsteps.Gap(r, p.Period, p.Limit)
		hits, refund := randsteps.Hits(r, p.Capacity())
		for refund && !withRefunds {
			hits, refund = randsteps.Hits(r, p.Capacity())
		}
		ev := event{now: now, hits: hits, refund: refund, before: s}
		s, ev.d = Step(p, s, now, hits, refund)
		ev.after = s
		evs = append(evs, ev)
	}
	return evs
}

// simulateChecked simulates n steps without refunds on the random policy of
// algorithm a that seed draws, and checks the decisions' basics.
func simulateChecked(t *testing.T, a Algorithm, seed uint64, n int) (Policy, []event) {
	t.Helper()
	r := newRand(seed)
	p := randPolicy(r, a)
	evs := simulate(p, r, n, false)
	checkBasics(t, p, evs)
	return p, evs
}

// admittedPerWindow sums the admitted hits of evs by epoch-aligned window.
func admittedPerWindow(evs []event, period int64) map[int64]int64 {
	perWindow := map[int64]int64{}
	for _, ev := range evs {
		if ev.d.Allowed {
			perWindow[windowStart(ev.now, period)] += ev.hits
		}
	}
	return perWindow
}

func seeds(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(1000 + i)
	}
	return out
}

// checkBasics: decisions are in range, and denials consume nothing.
func checkBasics(t *testing.T, p Policy, evs []event) {
	t.Helper()
	for i, ev := range evs {
		if ev.d.Remaining < 0 || ev.d.Remaining > p.Capacity() || ev.d.ResetAfter < 0 {
			t.Fatalf("%+v step %d: decision %+v out of range", p, i, ev.d)
		}
	}
}

func TestBoundFixedWindow(t *testing.T) {
	for _, seed := range seeds(8) {
		p, evs := simulateChecked(t, FixedWindow, seed, 3000)
		perWindow := admittedPerWindow(evs, p.Period)
		for w, n := range perWindow {
			if n > p.Limit {
				t.Fatalf("seed %d %+v: window %d admitted %d", seed, p, w, n)
			}
		}
	}
}

func TestBoundSlidingWindow(t *testing.T) {
	for _, seed := range seeds(12) {
		p, evs := simulateChecked(t, SlidingWindow, seed, 3000)
		if p.Windows() > 1 {
			checkSubWindowBound(t, p, evs)
			continue
		}
		perWindow := admittedPerWindow(evs, p.Period)
		for j, ev := range evs {
			if !ev.d.Allowed || ev.hits == 0 {
				continue
			}
			start := windowStart(ev.now, p.Period)
			var span int64
			for i := j; i >= 0 && evs[i].now > ev.now-p.Period; i-- {
				if evs[i].d.Allowed {
					span += evs[i].hits
				}
			}
			prev := perWindow[start-p.Period]
			bound := p.Limit + prev*(ev.now-start)/p.Period
			if span > bound || span > 2*p.Limit-1 || perWindow[start] > p.Limit {
				t.Fatalf("seed %d %+v: %d admitted in the period up to %d (bound %d, window %d)", seed, p, span, ev.now, bound, perWindow[start])
			}
		}
	}
}

func TestSlidingLogIsExact(t *testing.T) {
	for _, seed := range seeds(8) {
		p, evs := simulateChecked(t, SlidingLog, seed, 3000)
		for j, ev := range evs {
			var inPeriod int64
			for i := j - 1; i >= 0 && evs[i].now > ev.now-p.Period; i-- {
				if evs[i].d.Allowed {
					inPeriod += evs[i].hits
				}
			}
			// A check-only request (0 hits) is allowed exactly when one
			// hit would be.
			fits := inPeriod+max(ev.hits, 1) <= p.Limit
			if ev.d.Allowed != fits {
				t.Fatalf("seed %d %+v step %d: %d in the trailing period + %d hits: allowed=%v", seed, p, j, inPeriod, ev.hits, ev.d.Allowed)
			}
			left := p.Limit - inPeriod
			if ev.d.Allowed {
				left -= ev.hits
			}
			if ev.d.Remaining != max(left, 0) && ev.hits <= p.Limit {
				t.Fatalf("seed %d step %d: remaining %d, want %d", seed, j, ev.d.Remaining, left)
			}
		}
	}
}

// refBucket is an independent token bucket in exact rationals: tokens refill
// continuously at limit/period per µs up to burst.
type refBucket struct {
	p      Policy
	tokens *big.Rat
	last   int64
}

func (b *refBucket) step(now, hits int64, refund bool) Decision {
	burst := big.NewRat(b.p.Capacity(), 1)
	if b.tokens == nil {
		b.tokens = new(big.Rat).Set(burst)
		b.last = now
	}
	b.tokens.Add(b.tokens, big.NewRat((now-b.last)*b.p.Limit, b.p.Period))
	if b.tokens.Cmp(burst) > 0 {
		b.tokens.Set(burst)
	}
	b.last = now
	floor := func(x *big.Rat) int64 { return new(big.Int).Quo(x.Num(), x.Denom()).Int64() }
	ceilTime := func(tok *big.Rat) int64 { // ⌈tok·period/limit⌉ µs
		x := new(big.Rat).Mul(tok, big.NewRat(b.p.Period, b.p.Limit))
		q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
		if m.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		return q.Int64()
	}
	if refund {
		b.tokens.Add(b.tokens, big.NewRat(min(hits, b.p.Capacity()), 1))
		if b.tokens.Cmp(burst) > 0 {
			b.tokens.Set(burst)
		}
		hits = 0
	}
	full := ceilTime(new(big.Rat).Sub(burst, b.tokens))
	if !refund && hits > b.p.Capacity() {
		return Decision{ResetAfter: full, RetryAfter: Never}
	}
	h := big.NewRat(hits, 1)
	if hits == 0 && !refund {
		// Check only: allowed exactly when one token is there.
		h = big.NewRat(1, 1)
		if b.tokens.Cmp(h) >= 0 {
			return Decision{Allowed: true, Remaining: floor(b.tokens), ResetAfter: full}
		}
	}
	if b.tokens.Cmp(h) < 0 {
		return Decision{Remaining: floor(b.tokens), ResetAfter: full, RetryAfter: ceilTime(new(big.Rat).Sub(h, b.tokens))}
	}
	b.tokens.Sub(b.tokens, h)
	return Decision{Allowed: true, Remaining: floor(b.tokens), ResetAfter: ceilTime(new(big.Rat).Sub(burst, b.tokens))}
}

// TestBucketsMatchReference proves token_bucket and gcra exact: every
// decision, remaining and reset equals the rational model's, refunds
// included.
func TestBucketsMatchReference(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, GCRA} {
		for _, seed := range seeds(16) {
			r := newRand(seed)
			p := randPolicy(r, a)
			ref := refBucket{p: p}
			for i, ev := range simulate(p, r, 3000, true) {
				if want := ref.step(ev.now, ev.hits, ev.refund); ev.d != want {
					t.Fatalf("%v seed %d %+v step %d (hits %d refund %v, state %+v): got %+v, want %+v", a, seed, p, i, ev.hits, ev.refund, ev.before, ev.d, want)
				}
			}
		}
	}
}

// TestGCRAEqualsTokenBucket: gcra admits exactly what token_bucket admits,
// with the same Remaining, ResetAfter, state and Expiry, for any policy
// (whole or fractional emission intervals, any burst), on random sequences
// with refunds, check-only steps, config changes that keep the key, and a
// clock that sometimes steps back.
func TestGCRAEqualsTokenBucket(t *testing.T) {
	for _, seed := range seeds(24) {
		r := newRand(seed)
		p := randPolicy(r, TokenBucket)
		var sb, sg State
		now := t0 + r.Int64N(10*Second)
		for i := range 3000 {
			if r.IntN(200) == 0 {
				q := randPolicy(r, TokenBucket)
				p.Limit, p.Burst = q.Limit, q.Burst
			}
			g := p
			g.Algorithm = GCRA
			if r.IntN(50) == 0 {
				now -= r.Int64N(p.Period/max(p.Limit, 1) + 2)
			} else {
				now += randsteps.Gap(r, p.Period, p.Limit)
			}
			hits, refund := randsteps.Hits(r, p.Capacity())
			var db, dg Decision
			sb, db = Step(p, sb, now, hits, refund)
			sg, dg = Step(g, sg, now, hits, refund)
			if db != dg || sb.Time != sg.Time || sb.Frac != sg.Frac || Expiry(p, sb, now) != Expiry(g, sg, now) {
				t.Fatalf("seed %d step %d (%+v, now %d, hits %d refund %v): token_bucket %+v %+v, gcra %+v %+v", seed, i, p, now, hits, refund, db, sb, dg, sg)
			}
		}
	}
}

// TestBoundBuckets: admitted hits in any closed interval [a, b] never exceed
// burst + (b − a)·limit/period.
func TestBoundBuckets(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, GCRA} {
		for _, seed := range seeds(8) {
			p, evs := simulateChecked(t, a, seed, 2000)
			for j := range evs {
				if !evs[j].d.Allowed {
					continue
				}
				var sum int64
				for i := j; i >= 0; i-- {
					if !evs[i].d.Allowed {
						continue
					}
					sum += evs[i].hits
					if (sum-p.Capacity())*p.Period > (evs[j].now-evs[i].now)*p.Limit {
						t.Fatalf("%v seed %d %+v: %d admitted in [%d, %d]", a, seed, p, sum, evs[i].now, evs[j].now)
					}
				}
			}
		}
	}
}

// TestSteadyStreamNeverDenied: one hit at a time at or below the rate always
// passes; the same stream twice as fast must be denied (the test can fail).
func TestSteadyStreamNeverDenied(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, GCRA, SlidingLog} {
		for _, seed := range seeds(6) {
			r := newRand(seed)
			p := randPolicy(r, a)
			p.Burst = 0
			if r.IntN(2) == 0 && a != SlidingLog {
				p.Burst = 1 + r.Int64N(3)
			}
			// Arrival k at t0 + ⌈k·T⌉ plus a non-decreasing delay.
			at := func(k int64) int64 {
				q, r := mulDiv(k, p.Period, p.Limit)
				return fracCeil(q, r)
			}
			n := 3*p.Capacity() + 200
			var s State
			var delay int64
			for k := range n {
				if r.IntN(10) == 0 {
					delay += r.Int64N(p.Period/max(p.Limit, 1) + 1)
				}
				var d Decision
				s, d = Step(p, s, t0+at(k)+delay, 1, false)
				if !d.Allowed {
					t.Fatalf("%v seed %d %+v: hit %d of a steady stream denied: %+v", a, seed, p, k, d)
				}
			}
			s = State{}
			denied := false
			for k := range n {
				var d Decision
				s, d = Step(p, s, t0+at(k)/2, 1, false)
				denied = denied || !d.Allowed
			}
			if !denied {
				t.Fatalf("%v seed %d %+v: a stream at twice the rate was never denied", a, seed, p)
			}
		}
	}
}

// TestDecisionsExact checks, for every algorithm and random sequences with
// refunds and limit changes:
//   - a denial's RetryAfter is the first µs at which the same request
//     passes, or Never exactly when the hits exceed the capacity;
//   - ResetAfter, allowed or denied, is the first µs at which the whole
//     capacity is back, and equals Expiry of the new state; except for
//     sliding_window, where it is the end of the current window;
//   - after Expiry the state decides like no state at all;
//   - hits pass exactly when they are at most the check-only Remaining.
func TestDecisionsExact(t *testing.T) {
	for _, a := range Algorithms {
		for _, seed := range seeds(6) {
			t.Run(fmt.Sprintf("%v/%d", a, seed), func(t *testing.T) {
				r := newRand(seed)
				p := randPolicy(r, a)
				var s State
				now := t0 + r.Int64N(10*Second)
				for range 2000 {
					if r.IntN(200) == 0 { // a config change keeps the key
						q := randPolicy(r, a)
						p.Limit, p.Burst = q.Limit, q.Burst
					}
					now += randsteps.Gap(r, p.Period, p.Limit)
					hits, refund := randsteps.Hits(r, p.Capacity())
					checkExact(t, p, s, now, hits, refund)
					s, _ = Step(p, s, now, hits, refund)
				}
			})
		}
	}
}

func checkExact(t *testing.T, p Policy, s State, now, hits int64, refund bool) {
	t.Helper()
	capacity := p.Capacity()
	ns, d := Step(p, s, now, hits, refund)
	_, c := Step(p, s, now, 0, false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%+v state %+v now %d hits %d refund %v → %+v: %s", p, s, now, hits, refund, d, fmt.Sprintf(format, args...))
	}
	// Remaining is negative only for an overdrawn limit: here one whose
	// limit was lowered under its count (a config change below).
	if d.Remaining > capacity || d.ResetAfter < 0 || d.RetryAfter < Never || (d.Allowed && d.RetryAfter != 0) {
		fail("out of range")
	}
	if p.Limit <= 0 {
		// A block rule: every consume and check is denied for good, a
		// refund passes, and the reset is the end of the period's window.
		if d.Allowed != refund || (!refund && d.RetryAfter != Never) {
			fail("a limit of 0 decided %+v", d)
		}
		if end := windowStart(now, p.Period) + p.Period - now; d.ResetAfter != end {
			fail("ResetAfter %d, want the window's end %d", d.ResetAfter, end)
		}
		return
	}
	if never := d.RetryAfter == Never; never != (!d.Allowed && !refund && hits > capacity) {
		fail("RetryAfter Never for %d hits on capacity %d", hits, capacity)
	}
	if c.Remaining > 0 && c.Remaining <= capacity {
		if _, d := Step(p, s, now, c.Remaining, false); !d.Allowed {
			fail("check-only remaining %d denied", c.Remaining)
		}
	}
	if _, d := Step(p, s, now, c.Remaining+1, false); d.Allowed {
		fail("remaining %d, yet %d hits pass", c.Remaining, c.Remaining+1)
	}
	if !d.Allowed && !refund && hits <= capacity {
		if _, d2 := Step(p, s, now+d.RetryAfter, hits, false); !d2.Allowed {
			fail("still denied after RetryAfter: %+v", d2)
		}
		if _, d2 := Step(p, s, now+d.RetryAfter-1, hits, false); d2.Allowed {
			fail("RetryAfter not the first µs: passes 1 µs earlier")
		}
	}
	if p.Algorithm == FixedWindow || (p.Algorithm == SlidingWindow && p.Windows() == 1) {
		// The window algorithms report the end of the current window,
		// whatever it holds.
		start := windowStart(now, p.Period)
		if s.Time > start && (s.Count > 0 || s.Prev > 0) {
			start = s.Time // the clock went back: the stored window stays current
		}
		if end := start + p.Period - now; d.ResetAfter != end {
			fail("ResetAfter %d, want the window's end %d", d.ResetAfter, end)
		}
		if p.Algorithm == SlidingWindow || Expiry(p, ns, now) == 0 {
			return
		}
	}
	if e := Expiry(p, ns, now); e != d.ResetAfter {
		fail("Expiry %d ≠ ResetAfter", e)
	}
	{
		w := d.ResetAfter
		if _, d2 := Step(p, ns, now+w, 0, false); d2.Remaining != capacity {
			fail("capacity not back after ResetAfter: %+v", d2)
		}
		if w > 0 {
			if _, d2 := Step(p, ns, now+w-1, 0, false); d2.Remaining == capacity {
				fail("capacity back 1 µs before ResetAfter")
			}
		}
		for _, h := range []int64{0, 1, capacity} {
			_, got := Step(p, ns, now+w, h, false)
			_, want := Step(p, State{}, now+w, h, false)
			if got != want {
				fail("after Expiry, %d hits: %+v, no state: %+v", h, got, want)
			}
		}
	}
}
