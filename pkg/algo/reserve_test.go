package algo

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// shape applies n one-hit requests of checks at now, one after the other,
// threading the states, and returns the decisions of each request.
func shape(t *testing.T, checks []Check, states []State, now int64, n int) [][]Decision {
	t.Helper()
	var all [][]Decision
	for range n {
		out := make([]Decision, len(checks))
		ApplyAll(checks, states, now, out)
		all = append(all, out)
	}
	return all
}

func TestReserveShapes(t *testing.T) {
	tests := []struct {
		name     string
		p        Policy
		maxDelay int64
		n        int
		// wantDelays are the Delays of the admitted requests, in arrival
		// order; every later request is denied.
		wantDelays []int64
	}{
		{
			name: "gcra 10/s burst 1, 500ms", p: Policy{Algorithm: GCRA, Limit: 10, Period: Second, Burst: 1}, maxDelay: 500_000, n: 20,
			wantDelays: []int64{0, 100_000, 200_000, 300_000, 400_000, 500_000},
		},
		{
			name: "token_bucket 3/s burst 2, 1s", p: Policy{Algorithm: TokenBucket, Limit: 3, Period: Second, Burst: 2}, maxDelay: Second, n: 10,
			// 333 333⅓ µs a token, rounded up per reservation.
			wantDelays: []int64{0, 0, 333_334, 666_667, 1_000_000},
		},
		{
			name: "deny mode", p: Policy{Algorithm: GCRA, Limit: 10, Period: Second, Burst: 1}, maxDelay: 0, n: 5,
			wantDelays: []int64{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := []Check{{Policy: tt.p, Hits: 1, MaxDelay: tt.maxDelay}}
			states := make([]State, 1)
			all := shape(t, checks, states, t0, tt.n)
			for i, out := range all {
				d := out[0]
				if i < len(tt.wantDelays) {
					if !d.Allowed || d.Delay != tt.wantDelays[i] {
						t.Errorf("request %d: %+v, want allowed with delay %d", i, d, tt.wantDelays[i])
					}
					if d.Delay > 0 && d.ReservedAt != t0+d.Delay {
						t.Errorf("request %d: reserved at %d, want now + delay %d", i, d.ReservedAt, t0+d.Delay)
					}
					continue
				}
				if d.Allowed || d.Delay != 0 || d.RetryAfter <= tt.maxDelay {
					t.Errorf("request %d: %+v, want denied with a retry beyond %d", i, d, tt.maxDelay)
				}
			}
		})
	}
}

func TestReserveAllOrNothing(t *testing.T) {
	bucket := Policy{Algorithm: GCRA, Limit: 10, Period: Second, Burst: 1}
	other := Policy{Algorithm: TokenBucket, Limit: 10, Period: Second, Burst: 5}
	window := Policy{Algorithm: FixedWindow, Limit: 100, Period: Second}
	full := State{Time: t0 + 100_000} // one reservation ahead: retry 100 ms
	tests := []struct {
		name        string
		checks      []Check
		states      []State
		wantAllowed bool
		wantDelay   int64
		// wantStates are the states after; nil: unchanged.
		wantStates []State
	}{
		{
			name:        "delayed one waits, the other consumes at the reserved time",
			checks:      []Check{{Policy: bucket, Hits: 1, MaxDelay: 500_000}, {Policy: other, Hits: 1}, {Policy: window, Hits: 1}},
			states:      []State{full, {}, {}},
			wantAllowed: true, wantDelay: 100_000,
			wantStates: []State{{Time: t0 + 200_000}, {Time: t0 + 200_000}, {Time: t0, Count: 1}},
		},
		{
			name:        "a deny-mode limit denies: nothing reserved",
			checks:      []Check{{Policy: bucket, Hits: 1, MaxDelay: 500_000}, {Policy: other, Hits: 1}},
			states:      []State{full, {Time: t0 + 500_000}},
			wantAllowed: false,
		},
		{
			name:        "a wait beyond max_delay denies: nothing reserved",
			checks:      []Check{{Policy: bucket, Hits: 1, MaxDelay: 50_000}, {Policy: other, Hits: 1}},
			states:      []State{full, {}},
			wantAllowed: false,
		},
		{
			name:        "the latest of two reservations",
			checks:      []Check{{Policy: bucket, Hits: 1, MaxDelay: 500_000}, {Policy: other, Hits: 1, MaxDelay: 500_000}},
			states:      []State{full, {Time: t0 + 700_000}},
			wantAllowed: true, wantDelay: 300_000,
			wantStates: []State{{Time: t0 + 400_000}, {Time: t0 + 800_000}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := slices.Clone(tt.states)
			out := make([]Decision, len(tt.checks))
			allowed := ApplyAll(tt.checks, states, t0, out)
			if allowed != tt.wantAllowed {
				t.Fatalf("allowed %v, want %v (%+v)", allowed, tt.wantAllowed, out)
			}
			want := tt.wantStates
			if want == nil {
				want = tt.states
			}
			if !slices.EqualFunc(states, want, func(a, b State) bool { return a.Time == b.Time && a.Frac == b.Frac && a.Count == b.Count }) {
				t.Errorf("states %+v, want %+v", states, want)
			}
			for i, d := range out {
				if allowed && (!d.Allowed || d.Delay != tt.wantDelay) {
					t.Errorf("check %d: %+v, want allowed with delay %d", i, d, tt.wantDelay)
				}
				if !allowed && d.Delay != 0 {
					t.Errorf("check %d: %+v, want no delay on a denied request", i, d)
				}
			}
		})
	}
}

func TestCancel(t *testing.T) {
	p := Policy{Algorithm: GCRA, Limit: 10, Period: Second, Burst: 1}
	c := Check{Policy: p, Hits: 1, MaxDelay: Second}
	states := make([]State, 1)
	all := shape(t, []Check{c}, states, t0, 4) // at 0, 100, 200, 300 ms
	cancelOf := func(d Decision) Check {
		return Check{Policy: p, Hits: 1, Refund: true, ReservedAt: d.ReservedAt}
	}
	out := make([]Decision, 1)

	// The one at 200 ms has a later one: nothing returned.
	before := states[0]
	ApplyAll([]Check{cancelOf(all[2][0])}, states, t0+10, out)
	if states[0].Time != before.Time || states[0].Frac != before.Frac || out[0].Granted != 0 {
		t.Errorf("cancel of a middle reservation: state %+v (was %+v), granted %d; want unchanged, 0", states[0], before, out[0].Granted)
	}
	// The latest is returned, then the one before it is the latest.
	for _, i := range []int{3, 2} {
		ApplyAll([]Check{cancelOf(all[i][0])}, states, t0+10, out)
		if out[0].Granted != 1 {
			t.Fatalf("cancel of reservation %d: granted %d, want 1", i, out[0].Granted)
		}
	}
	// The next request gets the slot at 200 ms again.
	ApplyAll([]Check{c}, states, t0+10, out)
	if !out[0].Allowed || out[0].ReservedAt != t0+200_000 {
		t.Errorf("after returning two: %+v, want reserved at +200ms", out[0])
	}
}

// TestReserveBound runs random arrivals with random queue modes and
// cancellations through one bucket and checks the admission times (now +
// Delay) against the bucket's bound: in any span [a, b], at most burst +
// ⌊(b − a)·limit/period⌋ hits pass. It also checks that reservations pass
// in the order they were made.
func TestReserveBound(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 24))
		p := Policy{Algorithm: []Algorithm{GCRA, TokenBucket}[seed%2], Limit: 1 + r.Int64N(20), Period: Second, Burst: 1 + r.Int64N(4)}
		var s State
		now := t0
		type passed struct{ at, hits int64 }
		var admitted []passed
		var lastReserved int64
		for range 400 {
			now += r.Int64N(3 * p.Period / p.Limit)
			c := Check{Policy: p, Hits: 1 + r.Int64N(p.Burst), MaxDelay: r.Int64N(2 * Second)}
			states, out := []State{s}, make([]Decision, 1)
			if !ApplyAll([]Check{c}, states, now, out) {
				s = states[0]
				continue
			}
			s = states[0]
			d := out[0]
			if d.Delay > 0 && r.IntN(4) == 0 {
				// The caller gives up before its time.
				ApplyAll([]Check{{Policy: p, Hits: c.Hits, Refund: true, ReservedAt: d.ReservedAt}}, states, now+r.Int64N(d.Delay), out)
				s = states[0]
				if out[0].Granted > 0 {
					continue
				}
			}
			if d.Delay > 0 {
				if d.ReservedAt < lastReserved {
					t.Fatalf("seed %d: reservation at %d after one at %d", seed, d.ReservedAt, lastReserved)
				}
				lastReserved = d.ReservedAt
			}
			admitted = append(admitted, passed{now + d.Delay, c.Hits})
		}
		slices.SortFunc(admitted, func(a, b passed) int { return int(a.at - b.at) })
		for i := range admitted {
			var sum int64
			for j := i; j < len(admitted); j++ {
				sum += admitted[j].hits
				span := admitted[j].at - admitted[i].at
				if bound := p.Burst + span*p.Limit/p.Period; sum > bound {
					t.Fatalf("seed %d, %+v: %d hits pass in %dµs, bound %d", seed, p, sum, span, bound)
				}
			}
		}
	}
}
