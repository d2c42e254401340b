package algo

// windowStart returns the start of the epoch-aligned window holding now.
func windowStart(now, period int64) int64 {
	_, off := divmod(now, period)
	return now - off
}

// stepFixedWindow: windows aligned to the Unix epoch; hits are admitted if
// count + hits ≤ limit, and denied hits are not counted. A stored window
// later than now's (the clock went back, e.g. after a failover) stays the
// current one while it holds hits, so a clock step never resets a count.
// ResetAfter is always the end of the current window, whether or not it
// holds hits: what envoyproxy/ratelimit reports, and what a client told
// "check only" needs to know.
func stepFixedWindow(p Policy, s State, now, hits int64, refund bool) (State, Decision) {
	limit, period := p.Limit, p.Period
	start := windowStart(now, period)
	count := int64(0)
	if s.Time >= start && s.Count > 0 {
		start, count = s.Time, s.Count
	}
	if refund {
		count = max(count-hits, 0)
		hits = 0
	}
	ns := State{Time: start, Count: count}
	reset := start + period - now
	if hits > limit {
		return ns, never(reset)
	}
	if count+hits > limit {
		return ns, Decision{Remaining: limit - count, ResetAfter: reset, RetryAfter: reset}
	}
	count += hits
	ns.Count = count
	return ns, Decision{Allowed: true, Remaining: limit - count, ResetAfter: reset}
}

func expiryFixedWindow(p Policy, s State, now int64) int64 {
	if s.Count <= 0 {
		return 0
	}
	return s.Time + p.Period - now
}

// slidingSteps is the resolution of sliding_window's weight: the previous
// window's count is weighted by remSteps/steps with steps ≤ 2^20, so the
// products count·remSteps stay below 2^52 for counts up to MaxLimit, exact
// in Lua doubles. Periods up to 2^20 µs (1.05 s) are weighted per µs.
const slidingSteps = 1 << 20

// slidingQuantum returns the weight's time step in µs, ⌈period/2^20⌉, and
// the number of whole steps in a period.
func slidingQuantum(period int64) (step, steps int64) {
	step = ceilDiv(period, slidingSteps)
	steps, _ = divmod(period, step)
	return step, steps
}

// stepSlidingWindow: the previous and the current aligned window; the
// estimate prev·(1 − elapsed/period) + curr must stay ≤ limit. ResetAfter
// is always the end of the current window, as for fixed_window.
//
// The weight (1 − elapsed/period) = rem/period (rem = time left in the
// current window) is taken as remSteps/steps with remSteps = ⌈rem/step⌉ and
// steps = ⌊period/step⌋, never below the exact weight: the estimate errs
// towards denying, by less than prev/2^18 hits, and only for periods above
// 2^20 µs. Since curr, hits and limit are integers, estimate + hits ≤ limit
// is exactly used + hits ≤ limit with used = curr + ⌈prev·remSteps/steps⌉,
// computed in integers and identical in Go and Lua.
//
// Bound (tested): with a fixed limit, the hits admitted in any span
// (a, a+period] number at most limit + ⌊c·e/period⌋ ≤ 2·limit − 1, where c is
// the count of the aligned window the span starts in and e the elapsed time
// of the span's last admission in the next window. The admission at e needed
// curr + c·(period−e)/period ≤ limit, and the first window adds at most c.
// The worst case, limit hits at the very end of a window followed by a
// steady stream just before the next window ends, reaches 2·limit − 1 for
// limit ≤ period µs; every aligned window admits at most limit.
func stepSlidingWindow(p Policy, s State, now, hits int64, refund bool) (State, Decision) {
	limit, period := p.Limit, p.Period
	start := windowStart(now, period)
	curr, prev := int64(0), int64(0)
	if s.Time >= start && (s.Count > 0 || s.Prev > 0) {
		start, curr, prev = s.Time, max(s.Count, 0), max(s.Prev, 0)
	} else if s.Time == start-period {
		prev = max(s.Count, 0)
	}
	rem := min(start+period-now, period)
	step, steps := slidingQuantum(period)
	remSteps := min(ceilDiv(rem, step), steps)
	weighted := ceilDiv(prev*remSteps, steps)
	if refund {
		curr = max(curr-hits, 0)
		hits = 0
	}
	ns := State{Time: start, Count: curr, Prev: prev}
	reset := start + period - now
	used := curr + weighted
	if hits > limit {
		return ns, never(reset)
	}
	if used+hits > limit {
		return ns, Decision{Remaining: limit - used, ResetAfter: reset, RetryAfter: slidingWait(limit, period, start, curr, prev, hits, step, steps) - now}
	}
	ns.Count += hits
	return ns, Decision{Allowed: true, Remaining: limit - used - hits, ResetAfter: reset}
}

// slidingWait returns the earliest time at which hits (≤ limit) pass when
// nothing else arrives, for a state denied now. Within the current window
// the condition is ⌈prev·remSteps/steps⌉ ≤ need with need = limit − curr −
// hits, i.e. remSteps ≤ ⌊need·steps/prev⌋; in the next window prev is curr
// and need is limit − hits. The estimate never grows with time, so the first
// time that passes is exact.
func slidingWait(limit, period, start, curr, prev, hits, step, steps int64) int64 {
	need := limit - curr - hits
	if need >= 0 && prev > 0 {
		fit, _ := divmod(need*steps, prev)
		return start + period - fit*step
	}
	need = limit - hits
	if curr <= 0 {
		return start + period
	}
	fit, _ := divmod(need*steps, curr)
	if fit >= steps {
		return start + period
	}
	return start + 2*period - fit*step
}

func expirySlidingWindow(p Policy, s State, now int64) int64 {
	switch {
	case s.Count > 0:
		return s.Time + 2*p.Period - now
	case s.Prev > 0:
		return s.Time + p.Period - now
	}
	return 0
}
