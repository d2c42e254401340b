package algo

import "slices"

// stepSlidingLog: an exact log of the hits admitted in (now − period, now];
// hits are admitted if count + hits ≤ limit. Memory is one entry per hit,
// hence the cap in Validate.
//
// A time earlier than the newest entry (the clock went back) is logged in
// order rather than clamped to the newest entry: entries then expire no
// earlier than they would have, so a clock step never admits more.
//
// The Lua twin keeps the log in a sorted set with the time as score; the
// decision only needs the number of live entries and one entry by rank,
// which ZCOUNT and ZRANGE … BYSCORE LIMIT give without reading the log.
func stepSlidingLog(p Policy, s State, now, hits int64, refund, build bool) (State, Decision) {
	limit, period := p.Limit, p.Period
	first, _ := slices.BinarySearch(s.Log, now-period+1)
	live := s.Log[first:]
	count := int64(len(live))
	if refund {
		count -= min(hits, count)
		live = live[:count]
		hits = 0
	}
	newest := int64(0)
	if count > 0 {
		newest = live[count-1]
	}
	if hits > limit {
		return State{Log: live}, never(logReset(count, newest, period, now))
	}
	if count+hits > limit {
		// The (count+hits−limit)-th oldest entry must expire first.
		k := count + hits - limit
		return State{Log: live}, Decision{Remaining: limit - count, ResetAfter: logReset(count, newest, period, now), RetryAfter: live[k-1] + period - now}
	}
	if hits > 0 && (count == 0 || now > newest) {
		newest = now
	}
	if hits > 0 && build {
		live = insertTimes(live, now, hits)
	}
	count += hits
	return State{Log: live}, Decision{Allowed: true, Remaining: limit - count, ResetAfter: logReset(count, newest, period, now)}
}

// logReset is a log's ResetAfter: when its newest of count entries
// expires, 0 for an empty log.
func logReset(count, newest, period, now int64) int64 {
	if count == 0 {
		return 0
	}
	return newest + period - now
}

// insertTimes returns log with n copies of t inserted in order. Appending
// may write past len(log) into its spare capacity, which no caller's state
// sees; an insertion inside the log copies it, so the caller's entries are
// never moved.
func insertTimes(log []int64, t, n int64) []int64 {
	at, _ := slices.BinarySearch(log, t+1)
	if at == len(log) {
		log = slices.Grow(log, int(n))
		for range n {
			log = append(log, t)
		}
		return log
	}
	out := make([]int64, 0, int64(len(log))+n)
	out = append(out, log[:at]...)
	for range n {
		out = append(out, t)
	}
	return append(out, log[at:]...)
}

func expirySlidingLog(p Policy, s State, now int64) int64 {
	if len(s.Log) == 0 {
		return 0
	}
	return s.Log[len(s.Log)-1] + p.Period - now
}
