package algo

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/randsteps"
)

// checkSubWindowBound checks the bound of a sliding window in N ≥ 2
// sub-windows (subwindow.go): at every admission at now, in sub-window c,
// the hits admitted in sub-windows c−N+1 … c are at most the limit, and
// those admitted in the span (now − period, now] at most the limit plus
// the hits of sub-window c−N, the only one the span cuts.
func checkSubWindowBound(t *testing.T, p Policy, evs []event) {
	t.Helper()
	n := p.Windows()
	perSub := map[int64]int64{}
	for j, ev := range evs {
		if !ev.d.Allowed || ev.hits == 0 {
			continue
		}
		c, _, _ := subAt(ev.now, p.Period, n)
		perSub[c] += ev.hits
		var inside, span int64
		for i := j; i >= 0; i-- {
			e := evs[i]
			if !e.d.Allowed || e.hits == 0 {
				continue
			}
			k, _, _ := subAt(e.now, p.Period, n)
			if k <= c-n-1 {
				break
			}
			if k > c-n {
				inside += e.hits
			}
			if e.now > ev.now-p.Period {
				span += e.hits
			}
		}
		if inside > p.Limit || span > p.Limit+perSub[c-n] {
			t.Fatalf("%+v at %d: %d admitted in the last %d sub-windows, %d in the period (sub-window %d held %d)",
				p, ev.now, inside, n, span, c-n, perSub[c-n])
		}
	}
}

// TestSubWindowsOneIsTwoWindows: the sub-window step with N = 1 is the
// two-window estimate, decision for decision (its ResetAfter aside, which
// the two-window estimate reports as the current window's end): the
// sub-window code generalises stepSlidingWindow rather than replacing it.
func TestSubWindowsOneIsTwoWindows(t *testing.T) {
	for _, seed := range seeds(6) {
		r := newRand(seed)
		p := randPolicy(r, SlidingWindow)
		p.SubWindows = 0
		q := p
		q.SubWindows = 1
		var two, one State
		now := t0 + r.Int64N(10*Second)
		for i := range 2000 {
			now += randsteps.Gap(r, p.Period, p.Limit)
			hits := 1 + r.Int64N(3)
			var d2, d1 Decision
			two, d2 = stepSlidingWindow(p, two, now, hits, false)
			one, d1 = stepSubWindows(q, one, now, hits, false)
			d1.ResetAfter, d2.ResetAfter = 0, 0
			if d1 != d2 {
				t.Fatalf("seed %d step %d %+v at %d: two-window %+v, one sub-window %+v", seed, i, p, now, d2, d1)
			}
		}
	}
}

// TestSubWindowOverload is the scenario on the algorithm alone: one
// key, 200/s, a steady stream of k× the limit for 10 s starting 0.65–0.70 s
// into a second (the worst phase for the two-window estimate). With the
// default N the most admitted in any exact second is at most 1.1× the
// limit and the total within 2% of the ideal, at 2×, 4× and 10×; with
// N = 1 the two-window figures of the issue come back (about 1.7×, +6.5%).
// The table it logs is the measurement behind DefaultSubWindows.
func TestSubWindowOverload(t *testing.T) {
	const limit, seconds = 200, 10
	for _, tc := range []struct {
		subWindows        int64
		overloads         []int64
		maxRatio, maxOver float64 // worst exact second / limit; total over ideal
		minRatio          float64
	}{
		{subWindows: DefaultSubWindows, overloads: []int64{2, 4, 10}, maxRatio: 1.1, maxOver: 0.02},
		{subWindows: 1, overloads: []int64{10}, maxRatio: 1.7, maxOver: 0.07, minRatio: 1.6},
		{subWindows: 10, overloads: []int64{10}, maxRatio: 1.25, maxOver: 0.03},
		{subWindows: 60, overloads: []int64{10}, maxRatio: 1.05, maxOver: 0.01},
	} {
		for _, k := range tc.overloads {
			worst, worstTotal := 0.0, 0.0
			for phase := int64(650_000); phase <= 700_000; phase += 5_000 {
				p := Policy{Algorithm: SlidingWindow, Limit: limit, Period: Second, SubWindows: tc.subWindows}
				admitted := overload(p, t0-t0%Second+phase, k*limit, seconds)
				ratio := float64(maxInSecond(admitted)) / limit
				over := float64(len(admitted)-limit*seconds) / (limit * seconds)
				worst, worstTotal = max(worst, ratio), max(worstTotal, over)
			}
			t.Logf("N=%d %d× overload: worst exact second %.3f× the limit, total %+.2f%% of the ideal", tc.subWindows, k, worst, 100*worstTotal)
			if worst > tc.maxRatio || worstTotal > tc.maxOver || worst < tc.minRatio {
				t.Errorf("N=%d %d×: worst second %.3f× (want %.2f..%.2f), total %+.2f%% (want ≤ %.0f%%)",
					tc.subWindows, k, worst, tc.minRatio, tc.maxRatio, 100*worstTotal, 100*tc.maxOver)
			}
		}
	}
}

// overload sends rate one-hit requests per second, evenly, for seconds
// from start, and returns the times of those admitted.
func overload(p Policy, start, rate, seconds int64) []int64 {
	var s State
	var d Decision
	var admitted []int64
	for i := range rate * seconds {
		now := start + i*Second/rate
		if s, d = Step(p, s, now, 1, false); d.Allowed {
			admitted = append(admitted, now)
		}
	}
	return admitted
}

// maxInSecond returns the most of the ascending times in any (a, a+1 s].
func maxInSecond(times []int64) int {
	best, j := 0, 0
	for i := range times {
		for times[j] <= times[i]-Second {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// TestSubWindowRetryAfterTable: a denied request's RetryAfter is the time
// until enough old sub-windows have left the period, exactly.
func TestSubWindowRetryAfterTable(t *testing.T) {
	p := Policy{Algorithm: SlidingWindow, Limit: 10, Period: Second, SubWindows: 10}
	base := t0 - t0%Second
	for _, tc := range []struct {
		name  string
		state State
		now   int64
		retry int64
	}{
		// 10 hits in sub-window 0: full until sub-window 10 starts, then
		// sub-window 0 weighs (end − now)/100 ms: one hit passes once
		// ⌈10·rem/100 ms⌉ ≤ 9, i.e. rem ≤ 90 ms, 10 ms into sub-window 10.
		{"one full sub-window", State{Time: base, Subs: []int64{10}}, base + 500_000, 510_000},
		// 5 hits in sub-windows 0 and 5, asked in sub-window 6: in
		// sub-window 10 the counted part is sub-window 5's 5, so sub-window
		// 0 may weigh 4: ⌈5·rem/100 ms⌉ ≤ 4 once rem ≤ 80 ms, at 1.02 s.
		{"two halves", State{Time: base + 500_000, Subs: []int64{5, 0, 0, 0, 0, 5}}, base + 600_000, 420_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, d := Step(p, tc.state, tc.now, 1, false)
			if d.Allowed || d.RetryAfter != tc.retry {
				t.Fatalf("%+v: want denied, RetryAfter %d", d, tc.retry)
			}
			if _, d := Step(p, tc.state, tc.now+tc.retry, 1, false); !d.Allowed {
				t.Fatalf("denied after RetryAfter: %+v", d)
			}
			if _, d := Step(p, tc.state, tc.now+tc.retry-1, 1, false); d.Allowed {
				t.Fatalf("admitted 1 µs before RetryAfter")
			}
		})
	}
}

func TestSubWindowsValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: Second, SubWindows: 61}, "sub_windows 61"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: Second, SubWindows: -1}, "sub_windows -1"},
		{Policy{Algorithm: FixedWindow, Limit: 1, Period: Second, SubWindows: 2}, "only with sliding_window"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: 7, SubWindows: 8}, "shorter than 8 sub-windows"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: MaxPeriod, SubWindows: 60}, "reaches 2^53"},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: Second, SubWindows: 60}, ""},
		{Policy{Algorithm: SlidingWindow, Limit: 1, Period: 7, SubWindows: 7}, ""},
	} {
		err := tc.p.Validate()
		if got := fmt.Sprint(err); (tc.want == "") != (err == nil) || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
	if n := DefaultSubWindowsFor(SlidingWindow, MaxPeriod); n < 1 || (Policy{Algorithm: SlidingWindow, Limit: 1, Period: MaxPeriod, SubWindows: n}).Validate() != nil {
		t.Errorf("default for the longest period: %d, not valid", n)
	}
}
