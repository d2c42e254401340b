package algo

// Token bucket and GCRA share one model: a bucket of capacity burst that
// refills limit tokens per period, one token every T = period/limit µs. The
// state is the time TAT at which the bucket is full again; at time now it
// holds burst − (TAT − now)/T tokens (burst when TAT ≤ now), so hits fit if
// max(TAT, now) + hits·T − now ≤ burst·T, and admitting them moves TAT to
// max(TAT, now) + hits·T.
//
// T is rarely a whole number of µs (a limit of 3 per second makes it
// 333 333⅓ µs), so TAT is kept exactly, as the rational Time + Frac/limit µs
// with 0 ≤ Frac < limit, and multiplied by T with mulDiv, whose products stay
// below burst·limit < 2^53 (Validate), so Lua doubles compute them exactly.
// Rounding TAT up to whole µs instead would add up to 1 µs per admission: at
// 3 per second a burst of 3 would admit only 2, and at a few µs per token
// the error would reach tens of percent.
//
// token_bucket and gcra are therefore one algorithm, decided by
// stepTokenBucket, with the same Redis value: one string holding Time when
// Frac is 0 (so whenever period is a multiple of limit, e.g. 100 per
// second) and "<Time>:<Frac>" otherwise. They differ in name (and so in
// key) only.

// mulDiv returns a·period/limit as q + r/limit with 0 ≤ r < limit, for
// 0 ≤ a ≤ burst. With period = w·limit + m, a·period = a·w·limit + a·m and
// a·m < a·limit ≤ burst·limit < 2^53: no intermediate loses precision in Lua.
func mulDiv(a, period, limit int64) (q, r int64) {
	w, m := divmod(period, limit)
	q, r = divmod(a*m, limit)
	return a*w + q, r
}

// fracLE reports whether the duration aq + af/limit ≤ bq + bf/limit (fractions
// in [0, limit)).
func fracLE(aq, af, bq, bf int64) bool {
	return aq < bq || (aq == bq && af <= bf)
}

// fracSub returns (aq + af/limit) − (bq + bf/limit) with the fraction in
// [0, limit).
func fracSub(aq, af, bq, bf, limit int64) (q, f int64) {
	q, f = aq-bq, af-bf
	if f < 0 {
		q, f = q-1, f+limit
	}
	return q, f
}

// fracAdd returns (aq + af/limit) + (bq + bf/limit) with the fraction in
// [0, limit).
func fracAdd(aq, af, bq, bf, limit int64) (q, f int64) {
	q, f = aq+bq, af+bf
	if f >= limit {
		q, f = q+1, f-limit
	}
	return q, f
}

// fracCeil returns ⌈q + f/limit⌉ for 0 ≤ f < limit.
func fracCeil(q, f int64) int64 {
	if f > 0 {
		return q + 1
	}
	return q
}

// tokens returns the whole tokens that fit a slack of sq + sf/limit µs,
// ⌊slack/T⌋, capped at burst: the largest k ≤ burst with k·T ≤ slack. The
// exact slack·limit/period can exceed 2^53, so a float estimate is corrected
// with exact comparisons; the result is exact whatever the estimate, so the
// two executors agree although their estimates need not. A negative slack
// is a debt (charges, or a burst lowered by a reload): the result is then
// minus its whole tokens rounded up, −⌈debt/T⌉, at most burst + 1 deep.
func tokens(sq, sf, period, limit, burst int64) int64 {
	if sq < 0 {
		dq, df := fracSub(0, 0, sq, sf, limit)
		k := tokens(dq, df, period, limit, burst)
		if q, r := mulDiv(k, period, limit); q != dq || r != df {
			k++
		}
		return -k
	}
	est := (float64(sq)*float64(limit) + float64(sf)) / float64(period)
	k := burst
	if est < float64(burst) {
		k = int64(est)
	}
	for k > 0 {
		q, r := mulDiv(k, period, limit)
		if fracLE(q, r, sq, sf) {
			break
		}
		k--
	}
	for k < burst {
		q, r := mulDiv(k+1, period, limit)
		if !fracLE(q, r, sq, sf) {
			break
		}
		k++
	}
	return k
}

// bucketTAT returns s's TAT at now as tat + frac/limit: never before now
// (a full bucket), and rounded up to a whole µs when s was written under
// another limit (a Frac outside [0, limit)), never down.
func bucketTAT(s State, now, limit int64) (tat, frac int64) {
	tat, frac = s.Time, s.Frac
	if frac < 0 || frac >= limit {
		tat, frac = tat+1, 0
	}
	if tat < now {
		tat, frac = now, 0
	}
	return tat, frac
}

// stepTokenBucket is the exact bucket of token_bucket and gcra; TAT =
// tat + frac/limit.
func stepTokenBucket(p Policy, s State, now, hits int64, refund bool) (State, Decision) {
	limit, period, burst := p.Limit, p.Period, p.Capacity()
	tat, frac := bucketTAT(s, now, limit)
	if refund {
		q, r := debt(hits, period, limit, burst)
		tat, frac = fracSub(tat, frac, q, r, limit)
		if tat < now {
			tat, frac = now, 0
		}
		hits = 0
	} else if hits > burst {
		return State{Time: tat, Frac: frac}, never(fracCeil(tat-now, frac))
	}
	bq, br := mulDiv(burst, period, limit)
	// The hits fit if the debt TAT − now ≤ (burst − hits)·T.
	q, r := mulDiv(burst-hits, period, limit)
	if !fracLE(tat-now, frac, q, r) {
		sq, sf := fracSub(bq, br, tat-now, frac, limit)
		wq, wf := fracSub(tat-now, frac, q, r, limit)
		return State{Time: tat, Frac: frac}, Decision{Remaining: tokens(sq, sf, period, limit, burst), ResetAfter: fracCeil(tat-now, frac), RetryAfter: fracCeil(wq, wf)}
	}
	if hits > 0 {
		q, r = mulDiv(hits, period, limit)
		tat, frac = fracAdd(tat, frac, q, r, limit)
	}
	sq, sf := fracSub(bq, br, tat-now, frac, limit)
	return State{Time: tat, Frac: frac}, Decision{Allowed: true, Remaining: tokens(sq, sf, period, limit, burst), ResetAfter: fracCeil(tat-now, frac)}
}

// debt returns hits·T as q + r/limit for at most two capacities of hits
// (more count as two): a charge's debt and a refund's give-back are never
// larger (overdrawBucket). Each part is a mulDiv of at most burst hits, so
// every product stays exact.
func debt(hits, period, limit, burst int64) (q, r int64) {
	if hits <= burst {
		return mulDiv(hits, period, limit)
	}
	q, r = mulDiv(min(hits-burst, burst), period, limit)
	bq, br := mulDiv(burst, period, limit)
	return fracAdd(q, r, bq, br, limit)
}

// overdrawBucket returns the bucket s with hits charged as a debt: TAT
// moves to max(TAT, now) + hits·T, but never past now + 2·burst·T. A
// bucket is then at most one capacity in debt, and full again within two
// refills: a charge larger than that is counted as that much, which keeps
// every value exact in Lua (debt) and a runaway charge from locking a
// client out for longer than two refills.
func overdrawBucket(p Policy, s State, now, hits int64) State {
	limit, period, burst := p.Limit, p.Period, p.Capacity()
	tat, frac := bucketTAT(s, now, limit)
	q, r := debt(hits, period, limit, burst)
	tat, frac = fracAdd(tat, frac, q, r, limit)
	cq, cr := debt(2*burst, period, limit, burst)
	if !fracLE(tat-now, frac, cq, cr) {
		tat, frac = fracAdd(now, 0, cq, cr, limit)
	}
	return State{Time: tat, Frac: frac}
}

// expiryTokenBucket is the time until TAT, rounded up; a Frac outside
// [0, limit) counts as a whole µs, as in stepTokenBucket. gcra uses it too.
func expiryTokenBucket(s State, now int64) int64 {
	e := s.Time - now
	if s.Frac != 0 {
		e++
	}
	return e
}
