package redisalgo

// Queue mode (algo.Check.MaxDelay) on Redis: apply.lua reserves in the same
// script call that decides, so replicas sharing a Redis never reserve one
// slot twice. A request is all or nothing within one script call; on a
// cluster, a request whose keys span several hash slots runs one call per
// slot, and two calls would each pick their own wait. So only the checks
// of one slot (the first slot holding a queue-mode check) may queue; the
// checks of the other slots are applied in deny mode at the request's
// arrival, as window limits are in a queued request (algo/reserve.go):
// they count it up to its wait earlier than it passes. When a slot group
// denies, the groups that admitted are given back as before, a
// reservation by cancelling it (algo.Check.ReservedAt), so a reservation
// a later one depends on is never refunded. hash_tag puts all of a
// request's keys in one slot, where every one of its limits may queue.

// queueInOneSlot clears the MaxDelay of s's checks outside the first slot
// that has a queue-mode check. group calls it once the slots are known.
func queueInOneSlot(s *scratch) {
	slot, found := 0, false
	for j, i := range s.order {
		switch {
		case s.sorted[j].MaxDelay <= 0:
		case !found:
			slot, found = s.slots[i], true
		case s.slots[i] != slot:
			s.sorted[j].MaxDelay = 0
		}
	}
}
