package algo

// State is the stored state of one limit for any algorithm. The zero value
// means "no state yet" (a missing Redis key), and so does any state once
// Expiry has passed. Each algorithm uses these fields (how Redis holds
// them is docs/architecture.md#values; apply.lua's header has the details):
//
//   - fixed_window: Time = start of the window Count belongs to.
//   - sliding_window: Time = start of the current window, Count its hits,
//     Prev the hits of the window before it. With SubWindows N ≥ 2
//     instead: Time = start of the current sub-window, Subs[i] the hits of
//     the i-th sub-window before it (at most N+1, trailing zeros dropped).
//   - sliding_log: Log = the times of the admitted hits, ascending, one
//     entry per hit (a sorted set in Redis).
//   - token_bucket: the time at which the bucket is full again (the
//     theoretical arrival time, TAT), exactly: Time + Frac/Limit µs, with
//     0 ≤ Frac < Limit.
//   - gcra: the same exact TAT as token_bucket.
//
// All times are Unix microseconds.
type State struct {
	Time  int64
	Frac  int64
	Count int64
	Prev  int64
	Log   []int64
	Subs  []int64
}

// Step applies hits to one limit at time now (Unix µs) and returns the new
// state and the decision. It does not modify s (a sliding log may append in
// place past len(s.Log), which s does not see). Step is pure and safe for
// concurrent use.
//
//   - hits > 0 consumes them if they fit; a denied step consumes nothing
//     (a charge, Check.Charge, counts them anyway: charge).
//   - hits == 0 only checks: nothing is consumed, and the check is allowed
//     exactly when one hit would be (probe): a spent limit (nothing left)
//     denies it, as an overdrawn one does. Remaining is what is left.
//   - refund gives hits back: a window count drops (not below 0), a log
//     loses its newest hits entries, a bucket's TAT moves back by
//     hits·period/limit (not before now; at most two capacities, the
//     deepest debt a charge leaves). The decision is then the refunded
//     state's, allowed.
//
// Hits larger than the capacity are denied with RetryAfter Never: they
// would never fit. A Limit of 0 (or a non-positive Period or an unknown
// algorithm) denies every hit and every check-only request the same way
// and leaves s unchanged; its ResetAfter is the end of the period-aligned
// window holding now, as envoyproxy/ratelimit reports for any limit.
// Negative hits count as 0.
//
// Remaining is negative when the limit is overdrawn (charges, or a limit
// lowered below what was counted): it is minus the hits counted past the
// limit, or for a bucket minus the whole tokens of its debt.
func Step(p Policy, s State, now, hits int64, refund bool) (State, Decision) {
	return step(p, s, now, hits, refund, true)
}

// step is Step; with build false a sliding log skips building its new log
// (ApplyAll's first pass only needs the decision).
func step(p Policy, s State, now, hits int64, refund, build bool) (State, Decision) {
	if hits < 0 {
		hits = 0
	}
	if p.Limit <= 0 || p.Period <= 0 {
		return s, blocked(p, now, refund)
	}
	if hits == 0 && !refund {
		return s, probe(p, s, now)
	}
	return stepAlgorithm(p, s, now, hits, refund, build)
}

// stepAlgorithm is step for a positive limit and period, by algorithm.
func stepAlgorithm(p Policy, s State, now, hits int64, refund, build bool) (State, Decision) {
	switch p.Algorithm {
	case FixedWindow:
		return stepFixedWindow(p, s, now, hits, refund)
	case SlidingWindow:
		if p.SubWindows > 1 {
			return stepSubWindows(p, s, now, hits, refund)
		}
		return stepSlidingWindow(p, s, now, hits, refund)
	case SlidingLog:
		return stepSlidingLog(p, s, now, hits, refund, build)
	case TokenBucket, GCRA:
		// One bucket; only the Redis storage differs (see bucket.go).
		return stepTokenBucket(p, s, now, hits, refund)
	}
	return s, blocked(p, now, refund)
}

// probe is the decision of a check-only request (hits 0) on s: what is
// left and when the limit resets, as the state tells, allowed exactly
// when one hit would be, with that hit's RetryAfter. So a budget that is
// spent (0 left) or overdrawn denies a check, which is what a caller that
// checks before it charges needs (docs/rules.md, "Costs and charges").
func probe(p Policy, s State, now int64) Decision {
	_, d := stepAlgorithm(p, s, now, 0, false, false)
	_, one := stepAlgorithm(p, s, now, 1, false, false)
	d.Allowed, d.RetryAfter = one.Allowed, one.RetryAfter
	return d
}

// left is the check-only Remaining of s at now: probe's first step
// alone, without the one-hit step that only its Allowed needs (take reads
// no more). apply.lua's left mirrors it.
func left(p Policy, s State, now int64) int64 {
	if p.Limit <= 0 || p.Period <= 0 {
		return 0
	}
	_, d := stepAlgorithm(p, s, now, 0, false, false)
	return d.Remaining
}

// charge applies hits > 0 that are counted whatever the limit says
// (Check.Charge, a rule's `cost: charge`): when they fit it is Step;
// when they do not, they are counted all the same (overdraw) and the
// decision is the check-only decision of the overdrawn state, denied. The
// overdraft stays until the window ends or the refill pays it back. A
// limit of 0 counts nothing (it admits nothing to charge for). build is
// as in step. ApplyAll applies a Check.Charge with it.
func charge(p Policy, s State, now, hits int64, build bool) (State, Decision) {
	ns, d := step(p, s, now, hits, false, build)
	if d.Allowed || hits <= 0 || p.Limit <= 0 || p.Period <= 0 {
		return ns, d
	}
	ns = overdraw(p, s, now, hits, build)
	d = probe(p, ns, now)
	d.Allowed = false
	return ns, d
}

// overdraw returns s with hits counted past the limit. The window
// algorithms and the log count them as a step under a limit raised by
// MaxLimit would: an overdraft is at most MaxLimit hits deep, which keeps
// sliding_window's products exact (count·2^20 < 2^53); a counter already
// deeper than that counts nothing more. A bucket goes into debt
// (overdrawBucket).
func overdraw(p Policy, s State, now, hits int64, build bool) State {
	if p.Algorithm.UsesBurst() {
		return overdrawBucket(p, s, now, hits)
	}
	q := p
	q.Limit += MaxLimit
	ns, d := stepAlgorithm(q, s, now, hits, false, build)
	if !d.Allowed {
		return s
	}
	return ns
}

// blocked is the decision of a policy that admits nothing: refunds pass,
// everything else is denied for good. ResetAfter is the end of the
// period-aligned window holding now (0 without a period).
func blocked(p Policy, now int64, refund bool) Decision {
	reset := int64(0)
	if p.Period > 0 {
		reset = windowStart(now, p.Period) + p.Period - now
	}
	if refund {
		return Decision{Allowed: true, ResetAfter: reset}
	}
	return never(reset)
}

// never is the decision for hits that can never fit, on a limit that
// resets after reset µs.
func never(reset int64) Decision {
	return Decision{ResetAfter: reset, RetryAfter: Never}
}

// Expiry returns how many µs after now s becomes equivalent to no state at
// all: the TTL of its key. Zero means it already is, and the key can be
// deleted. Keeping a key longer than Expiry is harmless. Expiry does not
// depend on Limit or Burst.
func Expiry(p Policy, s State, now int64) int64 {
	var e int64
	switch p.Algorithm {
	case FixedWindow:
		e = expiryFixedWindow(p, s, now)
	case SlidingWindow:
		if p.SubWindows > 1 {
			e = expirySubWindows(p, s, now)
		} else {
			e = expirySlidingWindow(p, s, now)
		}
	case SlidingLog:
		e = expirySlidingLog(p, s, now)
	case TokenBucket, GCRA:
		e = expiryTokenBucket(s, now)
	}
	return max(e, 0)
}

// ApplyAll applies every check of one request at time now, all or nothing.
// states[i] is the state of checks[i] (the zero State for a missing key) and
// out[i] receives its decision; both must have len(checks). Checks on one
// counter (SameCounter) must be given the same state: they are merged (see
// Merge), and each of them receives the merged counter's new state and
// decision.
//
// allowed is false when any check that is not a refund is denied (a
// check-only check included: the request is then answered OVER_LIMIT, so it
// must consume nothing). Then no state changes except the refunds', the
// denied checks report their denial, and the other checks report the
// check-only decision of their unchanged state. Otherwise every consuming
// check's state is replaced by its new state. Refunds always apply; a
// check-only check's state is never replaced.
//
// Charges (Check.Charge) are counted whatever the request's outcome: a
// denied charge denies the request like any check (allowed is false, and
// the other checks consume nothing), but its own hits are counted past
// the limit (charge). Envoy ignores the answer to a charge made when a
// stream is done, so a charge must not depend on the request's other
// descriptors.
//
// In queue mode (Check.MaxDelay, see reserve.go) a token_bucket or gcra
// check denied with RetryAfter within its MaxDelay does not deny: the
// request is allowed to pass after the latest such RetryAfter, reported as
// Decision.Delay, and its bucket checks consume at that time. A refund with
// Check.ReservedAt cancels a reservation.
//
// For distinct counters this is the function the Lua script apply.lua
// mirrors (pkg/redisalgo merges before it calls the script). ApplyAll does
// not allocate except when a sliding log grows, a sliding window in
// sub-windows steps (its N+1 counts) or two checks share a counter.
func ApplyAll(checks []Check, states []State, now int64, out []Decision) (allowed bool) {
	merged, owner := Merge(checks)
	if merged == nil {
		return applyDistinct(checks, states, now, out)
	}
	mstates := make([]State, len(merged))
	mout := make([]Decision, len(merged))
	for i := len(owner) - 1; i >= 0; i-- {
		mstates[owner[i]] = states[i]
	}
	allowed = applyDistinct(merged, mstates, now, mout)
	for i, j := range owner {
		states[i], out[i] = mstates[j], mout[j]
	}
	return allowed
}

// applyDistinct is ApplyAll for checks on distinct counters.
func applyDistinct(checks []Check, states []State, now int64, out []Decision) (allowed bool) {
	allowed = true
	var wait int64 // queue mode: the latest reservation's delay (reserve.go)
	for i := range checks {
		c := &checks[i]
		switch {
		case c.Refund && c.ReservedAt != 0:
			states[i], out[i] = cancel(c, states[i], now)
			continue
		case c.Refund:
			states[i], out[i] = Step(c.Policy, states[i], now, c.Hits, true)
			continue
		case c.Take && c.Hits > 0:
			_, out[i] = take(c.Policy, states[i], now, c.Hits, false)
		default:
			_, out[i] = step(c.Policy, states[i], now, c.Hits, false, false)
		}
		if !out[i].Allowed {
			if reservable(c, out[i]) {
				wait = max(wait, out[i].RetryAfter)
				continue
			}
			allowed = false
		}
	}
	for i := range checks {
		c := &checks[i]
		if c.Refund || c.Hits <= 0 {
			continue
		}
		if c.Charge {
			// A charge is counted whatever the other checks decided:
			// it is not all or nothing (docs/rules.md, "Costs and
			// charges").
			states[i], out[i] = charge(c.Policy, states[i], now, c.Hits, true)
			continue
		}
		if !allowed && !out[i].Allowed {
			continue
		}
		switch {
		case allowed && c.Take:
			states[i], out[i] = take(c.Policy, states[i], now, c.Hits, true)
		case allowed:
			states[i], out[i] = Step(c.Policy, states[i], admitAt(c, now, wait), c.Hits, false)
		default:
			_, out[i] = step(c.Policy, states[i], now, 0, false, false)
		}
		if allowed && wait > 0 {
			out[i].Delay, out[i].ReservedAt = wait, now+wait
		}
	}
	return allowed
}

// take consumes as many of hits (> 0) as fit in s at now, at least one:
// g = min(hits, the check-only Remaining), then the consume of g. When none
// fits it returns the step of one hit, so a denied take reports when one
// hit would pass. Remaining is the most a consume admits for every
// algorithm but sliding_window, whose estimate may still refuse g; that
// take is denied too, which under-admits and never over-admits. apply.lua's
// take mirrors it.
func take(p Policy, s State, now, hits int64, build bool) (State, Decision) {
	g := min(hits, left(p, s, now))
	if g >= 1 {
		ns, d := step(p, s, now, g, false, build)
		if d.Allowed {
			d.Granted = g
			return ns, d
		}
	}
	ns, d := step(p, s, now, 1, false, build)
	if d.Allowed {
		d.Granted = 1
	}
	return ns, d
}

// divmod returns q = ⌊a/b⌋ and r = a − q·b with 0 ≤ r < b, for b > 0.
// The Lua twin computes the same from a double division and corrects it.
func divmod(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// ceilDiv returns ⌈a/b⌉ for b > 0.
func ceilDiv(a, b int64) int64 {
	q, r := divmod(a, b)
	if r > 0 {
		q++
	}
	return q
}
