package algo

import (
	"fmt"
	"testing"
)

// TestChargeTables: a charge larger than what is left is counted, the
// overdraft shows as a negative Remaining, and every later request,
// check-only included, is denied until the window or the refill pays it
// back. These are the examples: 800 then 900 of 1000 an hour.
func TestChargeTables(t *testing.T) {
	hour := 3600 * Second
	tests := []struct {
		name string
		p    Policy
		// steps alternate: a charge of hits (0: a check-only request).
		steps []chargeStep
	}{
		{
			name: "fixed_window",
			p:    Policy{Algorithm: FixedWindow, Limit: 1000, Period: hour},
			steps: []chargeStep{
				{at: 0, hits: 800, allowed: true, remaining: 200},
				{at: 1, hits: 900, allowed: false, remaining: -700},
				{at: 2, hits: 0, allowed: false, remaining: -700},
				{at: 3, hits: 1, allowed: false, remaining: -701},
				// The next window starts clean.
				{at: hour, hits: 0, allowed: true, remaining: 1000},
			},
		},
		{
			name: "sliding_window",
			p:    Policy{Algorithm: SlidingWindow, Limit: 1000, Period: hour},
			steps: []chargeStep{
				{at: 0, hits: 800, allowed: true, remaining: 200},
				{at: 1, hits: 900, allowed: false, remaining: -700},
				{at: 2, hits: 0, allowed: false, remaining: -700},
				// Early in the next window the previous one still weighs
				// almost whole: still overdrawn.
				{at: hour - t0%hour + 1, hits: 0, allowed: false, remaining: -700},
			},
		},
		{
			name: "sliding_window_subwindows",
			p:    Policy{Algorithm: SlidingWindow, Limit: 1000, Period: hour, SubWindows: 30},
			steps: []chargeStep{
				{at: 0, hits: 800, allowed: true, remaining: 200},
				{at: 1, hits: 900, allowed: false, remaining: -700},
				{at: 2, hits: 0, allowed: false, remaining: -700},
				{at: 2 * hour, hits: 0, allowed: true, remaining: 1000},
			},
		},
		{
			name: "sliding_log",
			p:    Policy{Algorithm: SlidingLog, Limit: 10, Period: Second},
			steps: []chargeStep{
				{at: 0, hits: 8, allowed: true, remaining: 2},
				{at: 1, hits: 9, allowed: false, remaining: -7},
				{at: 2, hits: 0, allowed: false, remaining: -7},
				{at: Second + 1, hits: 0, allowed: true, remaining: 10},
			},
		},
		{
			// 1000 tokens an hour, T = 3.6 s. After 800 and 900 the
			// bucket owes 700 tokens: 700·T = 2520 s of refill before it
			// is empty, and one more T for the first token.
			name: "token_bucket",
			p:    Policy{Algorithm: TokenBucket, Limit: 1000, Period: hour},
			steps: []chargeStep{
				{at: 0, hits: 800, allowed: true, remaining: 200},
				{at: 0, hits: 900, allowed: false, remaining: -700, retryAfter: 701 * 3_600_000},
				{at: 0, hits: 0, allowed: false, remaining: -700, retryAfter: 701 * 3_600_000},
				{at: 701*3_600_000 - 1, hits: 0, allowed: false, remaining: 0},
				{at: 701 * 3_600_000, hits: 0, allowed: true, remaining: 1},
			},
		},
		{
			// The debt is at most one capacity: a charge of 5000 on a
			// bucket of 1000 owes 1000 tokens, not 4000.
			name: "token_bucket_debt_cap",
			p:    Policy{Algorithm: TokenBucket, Limit: 1000, Period: hour},
			steps: []chargeStep{
				{at: 0, hits: 5000, allowed: false, remaining: -1000, retryAfter: 1001 * 3_600_000},
				{at: 0, hits: 5000, allowed: false, remaining: -1000, retryAfter: 1001 * 3_600_000},
			},
		},
		{
			name: "gcra",
			p:    Policy{Algorithm: GCRA, Limit: 3, Period: Second, Burst: 6},
			steps: []chargeStep{
				{at: 0, hits: 5, allowed: true, remaining: 1},
				{at: 0, hits: 4, allowed: false, remaining: -3},
				{at: 0, hits: 0, allowed: false, remaining: -3},
			},
		},
		{
			// A block rule counts nothing: it admits nothing to charge for.
			name: "zero_limit",
			p:    Policy{Algorithm: FixedWindow, Limit: 0, Period: Second},
			steps: []chargeStep{
				{at: 0, hits: 5, allowed: false, remaining: 0, retryAfter: Never},
				{at: 0, hits: 0, allowed: false, remaining: 0, retryAfter: Never},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runCharges(t, tt.p, tt.steps)
		})
	}
}

type chargeStep struct {
	at, hits   int64
	allowed    bool
	remaining  int64
	retryAfter int64 // checked when not 0
}

// runCharges applies steps as charges (hits > 0) or check-only requests.
func runCharges(t *testing.T, p Policy, steps []chargeStep) {
	t.Helper()
	var s State
	for i, st := range steps {
		var d Decision
		if st.hits > 0 {
			s, d = charge(p, s, t0+st.at, st.hits, true)
		} else {
			_, d = Step(p, s, t0+st.at, 0, false)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || (st.retryAfter != 0 && d.RetryAfter != st.retryAfter) {
			t.Errorf("step %d (at +%dµs, hits %d): got %+v, want allowed %v remaining %d retry %d", i, st.at, st.hits, d, st.allowed, st.remaining, st.retryAfter)
		}
	}
}

// TestChargeNeverLost: on every algorithm and random sequences, a charge
// is counted whole (up to the bucket's debt cap): the check-only
// Remaining after it is what it was less the hits.
func TestChargeNeverLost(t *testing.T) {
	for _, a := range Algorithms {
		for _, seed := range seeds(4) {
			t.Run(fmt.Sprintf("%v/%d", a, seed), func(t *testing.T) {
				r := newRand(seed)
				p := randPolicy(r, a)
				var s State
				now := t0
				for i := range 500 {
					now += r.Int64N(p.Period/max(p.Limit, 1) + 2)
					hits := 1 + r.Int64N(2*p.Capacity())
					_, before := Step(p, s, now, 0, false)
					var d Decision
					s, d = charge(p, s, now, hits, true)
					_, after := Step(p, s, now, 0, false)
					want := before.Remaining - hits
					if p.Algorithm.UsesBurst() {
						// At most one capacity of debt.
						want = max(want, -p.Capacity())
					}
					if after.Remaining != want || d.Remaining != after.Remaining {
						t.Fatalf("step %d: %d hits charged on remaining %d: decision %+v, then remaining %d, want %d", i, hits, before.Remaining, d, after.Remaining, want)
					}
					if d.Allowed != (before.Remaining >= hits) {
						t.Fatalf("step %d: %d hits on remaining %d: allowed %v", i, hits, before.Remaining, d.Allowed)
					}
				}
			})
		}
	}
}

// TestApplyAllCharges: a denied charge denies the request and is counted;
// the request's other checks consume nothing; a charge is counted even
// when another check denies.
func TestApplyAllCharges(t *testing.T) {
	budget := Policy{Algorithm: FixedWindow, Limit: 10, Period: Second}
	other := Policy{Algorithm: FixedWindow, Limit: 100, Period: Second}
	block := Policy{Algorithm: FixedWindow, Limit: 0, Period: Second}
	tests := []struct {
		name          string
		checks        []Check
		wantAllowed   bool
		wantRemaining []int64 // check-only remaining of each check after
	}{
		{"charge past the budget", []Check{
			{Entries: []Entry{{"b", "1"}}, Policy: budget, Hits: 15, Charge: true},
			{Entries: []Entry{{"o", "1"}}, Policy: other, Hits: 1},
		}, false, []int64{-5, 100}},
		{"charge beside a denying limit", []Check{
			{Entries: []Entry{{"b", "1"}}, Policy: budget, Hits: 3, Charge: true},
			{Entries: []Entry{{"o", "1"}}, Policy: block, Hits: 1},
		}, false, []int64{7, 0}},
		{"charge within the budget", []Check{
			{Entries: []Entry{{"b", "1"}}, Policy: budget, Hits: 4, Charge: true},
			{Entries: []Entry{{"o", "1"}}, Policy: other, Hits: 1},
		}, true, []int64{6, 99}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := make([]State, len(tt.checks))
			out := make([]Decision, len(tt.checks))
			if got := ApplyAll(tt.checks, states, t0, out); got != tt.wantAllowed {
				t.Fatalf("allowed %v, want %v: %+v", got, tt.wantAllowed, out)
			}
			for i, c := range tt.checks {
				if _, d := Step(c.Policy, states[i], t0, 0, false); d.Remaining != tt.wantRemaining[i] {
					t.Errorf("check %d: remaining %d after, want %d", i, d.Remaining, tt.wantRemaining[i])
				}
			}
		})
	}
}

// TestCheckOnlyIsOneHit: on every algorithm, a check-only request is
// allowed exactly when a one-hit request would be, and consumes nothing.
func TestCheckOnlyIsOneHit(t *testing.T) {
	for _, a := range Algorithms {
		for _, seed := range seeds(4) {
			r := newRand(seed)
			p := randPolicy(r, a)
			var s State
			now := t0
			for range 1000 {
				now += r.Int64N(p.Period/max(p.Limit, 1) + 2)
				ns, check := Step(p, s, now, 0, false)
				_, one := Step(p, s, now, 1, false)
				if check.Allowed != one.Allowed || check.RetryAfter != one.RetryAfter {
					t.Fatalf("%v seed %d %+v: check-only %+v, one hit %+v", a, seed, p, check, one)
				}
				if Expiry(p, ns, now) != Expiry(p, s, now) {
					t.Fatalf("%v seed %d: a check-only request changed the state", a, seed)
				}
				s, _ = Step(p, s, now, 1+r.Int64N(2), false)
			}
		}
	}
}
