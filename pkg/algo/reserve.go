package algo

// Queue mode (`on_limit: delay`, Check.MaxDelay) turns a denial into a
// reservation, as golang.org/x/time/rate's Reserve does, inside the one
// atomic ApplyAll (and its Lua twin), so that replicas sharing a store never
// reserve the same slot twice.
//
// A token_bucket or gcra check that would be denied with RetryAfter w ≤
// MaxDelay is reservable. A request is admitted when every consuming check
// is allowed or reservable; its wait W is the largest w. Its bucket checks
// then consume at now + W rather than at now: Step at a later time is the
// reservation itself, since the bucket's debt TAT − (now + W) is then small
// enough, and the new TAT is max(TAT, now + W) + hits·T. The state records
// the time the request will really pass, so the admissions of all
// requests, queued or not, are a sequence the bucket admits: never more
// than burst at once and limit per period after that. Reservations on one
// counter follow each other T apart, in the order they were made, which is
// the order of their reserved times: the output rate is the limit's rate.
//
// All or nothing: when any other check denies (including a reservable one
// whose wait exceeds its MaxDelay), nothing is reserved or consumed.
// Checks on the window algorithms in a queued request consume at now, the
// arrival, as they would in deny mode: their state cannot take a future
// time without losing the current window's count, so a queued request
// counts in the window it arrived in even when it passes in the next.
//
// Cancel returns a reservation whose caller gave up. x/time/rate's Cancel
// returns only the tokens no later reservation was based on; here a bucket
// gives back the hits when its TAT is still at most reservedAt + burst·T,
// the largest it can be right after the cancelled request's own
// reservation. Any later reservation on the counter moved it past that
// (when one token lasts at least 1 µs: a later reservation passes at least
// 1 µs later and leaves TAT above its own time + burst·T − 1 µs), and then
// nothing is given back: the slot stays unused and the limit under-admits
// by those hits, never over-admits. Plain consumption after the
// reservation leaves TAT lower, and giving back then is a plain refund. For
// limits faster than one token per µs the test cannot tell two
// reservations in the same µs apart, and a cancellation may give back
// hits a later reservation counted on: at most the cancelled hits more in
// that µs. Window limits keep what a cancelled request counted.

// reservable reports whether c, denied with d, may reserve its hits.
func reservable(c *Check, d Decision) bool {
	return c.MaxDelay > 0 && !c.Take && !c.Refund && !c.Charge && c.Hits > 0 && c.Policy.Algorithm.spec().MayQueue &&
		d.RetryAfter > 0 && d.RetryAfter <= c.MaxDelay
}

// admitAt is the time a consuming check of a request that waits wait µs is
// applied at: now + wait for a bucket (Spec.MayQueue), now for the window
// algorithms.
func admitAt(c *Check, now, wait int64) int64 {
	if c.Policy.Algorithm.spec().MayQueue {
		return now + wait
	}
	return now
}

// cancel applies a cancellation (a refund whose ReservedAt is set): the
// refund of c.Hits when the reservation may be returned, reporting the
// hits given back in Granted; else nothing changes and the decision is
// the check-only one. apply.lua's cancel mirrors it.
func cancel(c *Check, s State, now int64) (State, Decision) {
	p := c.Policy
	if c.Hits <= 0 || !returnable(p, s, c.ReservedAt) {
		_, d := step(p, s, now, 0, false, false)
		return s, d
	}
	ns, d := Step(p, s, now, c.Hits, true)
	d.Granted = min(c.Hits, p.Capacity())
	return ns, d
}

// returnable reports whether a bucket's TAT is still at most reservedAt +
// burst·T: no reservation was made after the one at reservedAt.
func returnable(p Policy, s State, reservedAt int64) bool {
	if !p.Algorithm.spec().MayQueue || p.Limit <= 0 || p.Period <= 0 {
		return false
	}
	tat, frac := s.Time, s.Frac
	if frac < 0 || frac >= p.Limit {
		tat, frac = tat+1, 0
	}
	bq, br := mulDiv(p.Capacity(), p.Period, p.Limit)
	return fracLE(tat-reservedAt, frac, bq, br)
}
