package redisalgo

// Queue mode (algo.Check.MaxDelay) on Redis: apply.lua reserves in the same
// script call that decides, so replicas sharing a Redis never reserve one
// slot twice. A request is all or nothing within one script call only; on
// a cluster, a request whose keys span several hash slots runs one call
// per slot, and each call would pick its own wait. Such a request is
// therefore applied in deny mode: its limits do not queue (hash_tag puts a
// request's keys in one slot, where they do). The Backend's cross-slot
// refund then only ever returns plain consumption.

// denyAcrossSlots clears the MaxDelay of s's checks when they span more
// than one hash slot. group calls it once the slots are known.
func denyAcrossSlots(s *scratch) {
	if len(s.order) < 2 || s.slots[s.order[0]] == s.slots[s.order[len(s.order)-1]] {
		return
	}
	for i := range s.sorted {
		s.sorted[i].MaxDelay = 0
	}
}
