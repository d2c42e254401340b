package algo

import "testing"

// TestApplyAllTake checks the take mode a lease is granted with: it
// consumes as many of its hits as fit, at least one, reports them in
// Granted, and takes part in the request's all or nothing.
func TestApplyAllTake(t *testing.T) {
	fw := Policy{Algorithm: FixedWindow, Limit: 5, Period: Second}
	tb := Policy{Algorithm: TokenBucket, Limit: 10, Period: Second, Burst: 4}
	one := func(p Policy, value string, hits int64, take bool) Check {
		return Check{Domain: "d", Entries: []Entry{{Key: "k", Value: value}}, HashTag: -1, Policy: p, Hits: hits, Take: take}
	}
	tests := []struct {
		name    string
		checks  []Check
		states  []State
		allowed bool
		granted []int64
		after   []State // nil: unchanged
	}{
		{
			name:    "fixed_window_part",
			checks:  []Check{one(fw, "a", 10, true)},
			states:  []State{{Time: t0, Count: 3}},
			allowed: true,
			granted: []int64{2},
			after:   []State{{Time: t0, Count: 5}},
		},
		{
			name:    "fixed_window_whole",
			checks:  []Check{one(fw, "a", 2, true)},
			states:  []State{{Time: t0, Count: 1}},
			allowed: true,
			granted: []int64{2},
			after:   []State{{Time: t0, Count: 3}},
		},
		{
			name:    "fixed_window_full_denied",
			checks:  []Check{one(fw, "a", 3, true)},
			states:  []State{{Time: t0, Count: 5}},
			granted: []int64{0},
		},
		{
			name:    "token_bucket_burst",
			checks:  []Check{one(tb, "a", 100, true)},
			states:  []State{{}},
			allowed: true,
			granted: []int64{4},
			after:   []State{{Time: t0 + 400_000}},
		},
		{
			name:    "denied_neighbour_takes_nothing",
			checks:  []Check{one(fw, "a", 3, true), one(fw, "b", 1, false)},
			states:  []State{{Time: t0, Count: 1}, {Time: t0, Count: 5}},
			granted: []int64{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := append([]State(nil), tt.states...)
			out := make([]Decision, len(tt.checks))
			allowed := ApplyAll(tt.checks, states, t0, out)
			if allowed != tt.allowed {
				t.Fatalf("allowed %v, want %v (%+v)", allowed, tt.allowed, out)
			}
			for i := range out {
				if out[i].Granted != tt.granted[i] {
					t.Errorf("check %d granted %d, want %d (%+v)", i, out[i].Granted, tt.granted[i], out[i])
				}
			}
			want := tt.after
			if want == nil {
				want = tt.states
			}
			for i := range states {
				if states[i].Time != want[i].Time || states[i].Count != want[i].Count || states[i].Frac != want[i].Frac {
					t.Errorf("check %d state %+v, want %+v", i, states[i], want[i])
				}
			}
		})
	}
}
