package algo

import "fmt"

// sliding_window with N ≥ 2 sub-windows (Policy.SubWindows).
//
// Each period is cut into N sub-windows aligned to the Unix epoch: within
// the window [q·period, (q+1)·period), sub-window k covers the offsets r
// with ⌊r·N/period⌋ = k, i.e. [⌈k·period/N⌉, ⌈(k+1)·period/N⌉). When N
// divides the period they are all period/N long; otherwise their lengths
// differ by at most 1 µs. Sub-windows are numbered absolutely, q·N + k, so
// that sub-window a + N starts exactly one period after sub-window a.
//
// The estimate at now, in sub-window c, is the hits of sub-windows
// c−N+1 … c (all inside (now − period, now]) plus the hits of sub-window
// c−N weighted by how much of it the trailing period still overlaps:
// (end of c − now)/(length of c). With N = 1 this is the two-window
// estimate of stepSlidingWindow; N sub-windows shrink the share of the
// period that is estimated rather than counted to 1/N of it.
//
// The weight is taken in the same ≤ 2^20 steps as the two-window one (see
// slidingQuantum, applied to the sub-window's length), rounded up, so that
// used = full + ⌈partial·remSteps/steps⌉ is an integer computed alike in
// Go and Lua, and errs towards denying.
//
// The state keeps the counts of sub-windows c, c−1, …, c−N (Subs[i] is
// sub-window c−i's, trailing zeros dropped) and Time = the start of c.
//
// Bound: the hits admitted in any span (a, a + period] number at most
// limit + (1 − w)·h, where h is the count of the sub-window the span
// starts in and w the weight it had at the span's last admission; since
// a sub-window fills at the clients' rate for 1/N of the period, a steady
// overload of k× the limit overshoots by at most about k·limit/(4N) when
// the key starts mid-sub-window (the admitted hits of that first
// sub-window then sit in its second part), and by nothing in the steady
// state.

// MaxSubWindows is the largest Policy.SubWindows: it bounds the state at
// N + 1 counts (one Redis string of a few hundred bytes at most) and the
// script's work per decision.
const MaxSubWindows int64 = 60

// subAt returns the absolute index of the sub-window holding t and its
// start and end (exclusive). r·n < period·n < 2^53 (Validate).
func subAt(t, period, n int64) (idx, start, end int64) {
	q, r := divmod(t, period)
	k, _ := divmod(r*n, period)
	base := q * period
	return q*n + k, base + ceilDiv(k*period, n), base + ceilDiv((k+1)*period, n)
}

// subStart returns the start of absolute sub-window idx.
func subStart(idx, period, n int64) int64 {
	q, k := divmod(idx, n)
	return q*period + ceilDiv(k*period, n)
}

// subCounts returns the counts of sub-windows c, c−1, …, c−N (n+1 of them)
// that s holds, with c the index of now's sub-window, or of the stored one
// when that is later (the clock went back: as stepSlidingWindow does, the
// stored sub-window stays the current one while it holds hits). Negative
// counts read as 0.
func subCounts(s State, now, period, n int64) (counts []int64, c, start, end int64) {
	c, start, end = subAt(now, period, n)
	counts = make([]int64, n+1)
	if subNewest(s) < 0 {
		return counts, c, start, end
	}
	h, _, _ := subAt(s.Time, period, n)
	if h > c {
		c, start, end = h, subStart(h, period, n), subStart(h+1, period, n)
	}
	for i, v := range s.Subs {
		if j := c - h + int64(i); j >= 0 && j <= n {
			counts[j] = max(v, 0)
		}
	}
	return counts, c, start, end
}

// subNewest returns the index in s.Subs of its newest positive count, or
// -1 when it holds none.
func subNewest(s State) int {
	for i, v := range s.Subs {
		if v > 0 {
			return i
		}
	}
	return -1
}

// subState is the state of counts (sub-windows c, c−1, …) with c starting
// at start: trailing zeros are dropped, and no counts at all is Subs nil.
func subState(start int64, counts []int64) State {
	k := len(counts)
	for k > 0 && counts[k-1] <= 0 {
		k--
	}
	if k == 0 {
		return State{Time: start}
	}
	return State{Time: start, Subs: append([]int64(nil), counts[:k]...)}
}

// stepSubWindows is stepSlidingWindow for p.SubWindows = N ≥ 2 (see the
// file comment). A refund takes hits back from the newest sub-windows
// inside the period first, not below 0. ResetAfter is the time until the
// newest counted hit has left the period entirely (Expiry): only then is
// the whole limit back.
func stepSubWindows(p Policy, s State, now, hits int64, refund bool) (State, Decision) {
	limit, period, n := p.Limit, p.Period, p.SubWindows
	counts, c, start, end := subCounts(s, now, period, n)
	rem := min(end-now, end-start)
	step, steps := slidingQuantum(end - start)
	remSteps := min(ceilDiv(rem, step), steps)
	if refund {
		for i := int64(0); i < n && hits > 0; i++ {
			back := min(counts[i], hits)
			counts[i] -= back
			hits -= back
		}
		hits = 0
	}
	full := int64(0)
	for _, v := range counts[:n] {
		full += v
	}
	weighted := ceilDiv(counts[n]*remSteps, steps)
	used := full + weighted
	allowed := hits <= limit && used+hits <= limit
	if allowed {
		counts[0] += hits
	}
	// One state and one expiry per step: the script builds each as a table.
	ns := subState(start, counts)
	reset := expirySubWindows(p, ns, now)
	switch {
	case hits > limit:
		return ns, never(reset)
	case !allowed:
		return ns, Decision{Remaining: limit - used, ResetAfter: reset, RetryAfter: subWait(limit, hits, period, n, c, counts) - now}
	}
	return ns, Decision{Allowed: true, Remaining: limit - used - hits, ResetAfter: reset}
}

// subWait returns the earliest time at which hits (≤ limit) pass when
// nothing else arrives, for counts (of sub-windows c, c−1, … c−N) denied
// now. In sub-window c+k the counted part is counts[0 … N−1−k] and the
// weighted one counts[N−k]; within a sub-window the estimate only falls,
// so, as in slidingWait, the first passing time is ⌈partial·remSteps/steps⌉
// ≤ need ⟺ remSteps ≤ ⌊need·steps/partial⌋. By sub-window c+N+1 nothing
// is left.
func subWait(limit, hits, period, n, c int64, counts []int64) int64 {
	full := int64(0)
	for _, v := range counts[:n] {
		full += v
	}
	for k := int64(0); k <= n; k++ {
		if k > 0 {
			full -= counts[n-k]
		}
		need := limit - hits - full
		if need < 0 {
			continue
		}
		start, end := subStart(c+k, period, n), subStart(c+k+1, period, n)
		partial := counts[n-k]
		if partial == 0 {
			return start
		}
		step, steps := slidingQuantum(end - start)
		fit, _ := divmod(need*steps, partial)
		if fit >= steps {
			return start
		}
		return end - fit*step
	}
	return subStart(c+n+1, period, n)
}

// expirySubWindows: the newest positive count's sub-window j counts until
// sub-window j+N ends, one period after j's own end.
func expirySubWindows(p Policy, s State, now int64) int64 {
	i := subNewest(s)
	if i < 0 {
		return 0
	}
	h, _, _ := subAt(s.Time, p.Period, p.SubWindows)
	return subStart(h-int64(i)+p.SubWindows+1, p.Period, p.SubWindows) - now
}

// subWindowsProblem says why n sub-windows do not fit p, or "" when they
// do: 0..MaxSubWindows, only for sliding_window, each at least 1 µs long,
// and offsets·n exact in a double (period·n < 2^53).
func subWindowsProblem(p Policy) string {
	n := p.SubWindows
	switch {
	case n == 0:
		return ""
	case n < 0 || n > MaxSubWindows:
		return fmt.Sprintf("sub_windows %d (want 1..%d)", n, MaxSubWindows)
	case p.Algorithm != SlidingWindow:
		return fmt.Sprintf("sub_windows set for algorithm %s (want sub_windows only with sliding_window)", p.Algorithm)
	case n > 1 && p.Period > 0 && p.Period < n:
		return fmt.Sprintf("period %dµs shorter than %d sub-windows of 1µs", p.Period, n)
	case n > 1 && p.Period > (exact-1)/n:
		return fmt.Sprintf("period %dµs × %d sub-windows reaches 2^53 (not exact in Redis Lua)", p.Period, n)
	}
	return ""
}

// Windows returns the number of sub-windows p's state is kept in: its
// SubWindows for sliding_window when above 1, else 1 (the two-window
// estimate, and every other algorithm).
func (p Policy) Windows() int64 {
	if p.Algorithm == SlidingWindow && p.SubWindows > 1 {
		return p.SubWindows
	}
	return 1
}

// SubWindowStart returns the start (Unix µs) of absolute sub-window idx of
// a period split in n: the Time of a state whose current sub-window is
// idx. Backends that store the index use it to read the state back.
func SubWindowStart(idx, period, n int64) int64 { return subStart(idx, period, n) }

// DefaultSubWindows is the sub-window count of a sliding_window that
// names none. Chosen by measurement (TestSubWindowOverload, BENCHMARKS.md
// "sliding_window sub-windows"): at 10× overload started mid-sub-window,
// the worst exact period admits about 1 + 10/(4N) limits (1.08 at 30, 1.12
// at 20), while each sub-window costs Redis about 2-3 bytes and a little
// Lua per decision.
const DefaultSubWindows int64 = 30

// DefaultSubWindowsFor returns the SubWindows of a limit of algorithm a and
// period that names none: DefaultSubWindows for sliding_window, fewer for
// a period so long (over 9 years) or so short (under 30 µs) that Validate
// would refuse it, and 0 for every other algorithm.
func DefaultSubWindowsFor(a Algorithm, period int64) int64 {
	if a != SlidingWindow {
		return 0
	}
	n := DefaultSubWindows
	if period > 0 {
		n = min(n, (exact-1)/period, period)
	}
	return max(n, 1)
}
