package stack

import "github.com/envoy-rls/envoy-rls/pkg/algo"

// Queue mode (algo.Check.MaxDelay) across the two Redis of perSecond: each
// side is one all-or-nothing call that would pick its own wait, so only
// the per-second side's checks may queue when both sides have queue-mode
// checks; the main side's are then applied in deny mode at the request's
// arrival (as pkg/redisalgo does across Cluster slots). A side that
// admitted a queued request is given back by cancelling its reservations
// (algo.Check.ReservedAt), never by a plain refund, which could give back
// a slot a later reservation depends on.

// queueOnOneSide clears main's MaxDelays when sec has a queue-mode check.
// Both are the split's own copies.
func queueOnOneSide(sec, main []algo.Check) {
	if !hasQueue(sec) {
		return
	}
	for i := range main {
		main[i].MaxDelay = 0
	}
}

func hasQueue(checks []algo.Check) bool {
	for i := range checks {
		if checks[i].MaxDelay > 0 {
			return true
		}
	}
	return false
}

// giveBack turns consuming check c, decided d, into the check that gives
// its hits back: a cancellation of its reservation when it queued.
func giveBack(c algo.Check, d algo.Decision) algo.Check {
	// At the time the hits were decided at: the refund is sent after the
	// other side answered, which may be past the window's end (algo.Applier).
	c.Refund, c.MaxDelay, c.At = true, 0, d.At
	if d.Delay > 0 {
		c.ReservedAt = d.ReservedAt
	}
	return c
}
