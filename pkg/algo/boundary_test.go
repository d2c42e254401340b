package algo

import (
	"fmt"
	"strings"
	"testing"
)

// TestBoundary measures, at 100 hits per second, the most hits each
// algorithm admits in any 1 s span (a, a + 1 s] under adversarial traffic,
// and checks it against the algorithm's bound:
//
//	fixed_window    2·limit      (limit at the end of a window, limit at the start of the next)
//	sliding_window  2·limit − 1  (see stepSlidingWindow)
//	sliding_log     limit        (exact)
//	token_bucket    burst + ⌊rate·(1 s − 1 µs)⌋ = 199
//	gcra            the same as token_bucket
//
// The traffic takes everything it can: at each arrival it asks for the
// check-only Remaining and consumes all of it.
func TestBoundary(t *testing.T) {
	const limit = 100
	w := t0 + 5*Second // a window boundary
	patterns := []struct {
		name  string
		times []int64
	}{
		{"boundary_burst", []int64{w - 1, w}},
		{"greedy_every_ms", every(w-Second/2, w+3*Second, 1000)},
		{"burst_then_greedy_ms", append([]int64{w - 1}, every(w, w+3*Second, 1000)...)},
		{"burst_then_greedy_µs_at_window_end", append(append([]int64{w - 1}, every(w, w+Second-2000, 1000)...), every(w+Second-2000, w+Second+1, 1)...)},
	}
	bounds := map[Algorithm]int64{FixedWindow: 2 * limit, SlidingWindow: 2*limit - 1, SlidingLog: limit, TokenBucket: 2*limit - 1, GCRA: 2*limit - 1}
	var report strings.Builder
	var policies []Policy
	for _, a := range Algorithms {
		policies = append(policies, Policy{Algorithm: a, Limit: limit, Period: Second})
	}
	// In sub-windows the adversary still gets its burst: limit hits at the
	// end of one sub-window are weighted as if spread over it.
	policies = append(policies, Policy{Algorithm: SlidingWindow, Limit: limit, Period: Second, SubWindows: DefaultSubWindows})
	for _, p := range policies {
		a := p.Algorithm
		worst := int64(0)
		name := a.String()
		if p.SubWindows > 1 {
			name = fmt.Sprintf("%s/%d", a, p.SubWindows)
		}
		fmt.Fprintf(&report, "\n%-18s bound %3d:", name, bounds[a])
		for _, pat := range patterns {
			var s State
			var times, hits []int64
			for _, now := range pat.times {
				_, c := Step(p, s, now, 0, false)
				if c.Remaining == 0 {
					continue
				}
				var d Decision
				s, d = Step(p, s, now, c.Remaining, false)
				if !d.Allowed {
					t.Fatalf("%v: check-only remaining %d denied at %d", a, c.Remaining, now)
				}
				times, hits = append(times, now), append(hits, c.Remaining)
			}
			most := maxInSpan(times, hits, p.Period)
			worst = max(worst, most)
			fmt.Fprintf(&report, " %s=%d", pat.name, most)
			if most > bounds[a] {
				t.Errorf("%s, %s: %d admitted in one period, bound %d", name, pat.name, most, bounds[a])
			}
		}
		if a == FixedWindow && worst != 2*limit {
			t.Errorf("fixed_window admitted at most %d in a period, want 2·limit = %d at the boundary", worst, 2*limit)
		}
		if a == SlidingLog && worst != limit {
			t.Errorf("sliding_log admitted at most %d in a period, want exactly %d", worst, limit)
		}
	}
	t.Logf("most hits admitted in any 1 s span at 100/s:%s", report.String())
}

// every returns from, from+step, … below to.
func every(from, to, step int64) []int64 {
	var out []int64
	for t := from; t < to; t += step {
		out = append(out, t)
	}
	return out
}

// maxInSpan returns the most hits in any span (a, a+period] of the sorted
// admission times.
func maxInSpan(times, hits []int64, period int64) int64 {
	var most, sum int64
	i := 0
	for j := range times {
		sum += hits[j]
		for times[i] <= times[j]-period {
			sum -= hits[i]
			i++
		}
		most = max(most, sum)
	}
	return most
}
