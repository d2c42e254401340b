package algo

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key   string
	Value string
}

// Check asks a backend to apply Hits to one limit. It is the unit of work
// that pkg/rules produces from a request and that every backend consumes.
type Check struct {
	// Domain is the rate-limit domain of the request.
	Domain string
	// Entries are the request descriptor's entries that identify the
	// counter (all entries up to the matched depth, with their values).
	Entries []Entry
	// HashTag is the index into Entries whose value co-locates this limit's
	// key with other limits of the same value on Redis Cluster (the rule's
	// hash_tag); -1 means the tag is the limit's whole identity.
	HashTag int
	// Policy is the limit to apply.
	Policy Policy
	// Hits is the cost of the request; zero checks without consuming.
	Hits int64
	// Refund gives Hits back instead of consuming them (is_negative_hits).
	Refund bool
	// Charge counts Hits even when they do not fit (a limit's `cost:
	// charge`): the check is still denied then, and the request with
	// it, but the hits are counted past the limit (charge in state.go),
	// and they are counted whatever the request's other checks decide.
	// A budget charged when a response is done (Envoy's
	// apply_on_stream_done, whose answer Envoy ignores) needs it: a
	// refused charge would be a response nobody pays for. Charges never
	// queue, take or lease. It is what the check does, not which counter
	// it is.
	Charge bool
	// Take makes Hits the most to consume: the check consumes as many of
	// them as fit now, at least one, and reports how many in
	// Decision.Granted; when none fits it is denied like a one-hit check.
	// A lease (pkg/lease) is granted this way, so the shared state is
	// debited only what its algorithm admits. A take must be the only check
	// on its counter in a request (merged with others it becomes a plain
	// consume of Hits), and is never a refund.
	Take bool
	// Lease reports that the rule allows this limit to be leased (`lease:
	// auto`). It says how a replica may serve the counter, not which
	// counter it is, so it is not part of the counter identity.
	Lease bool
	// MaxDelay puts the check in queue mode (`on_limit: delay`): a
	// token_bucket or gcra check that would be denied, but whose RetryAfter
	// is at most MaxDelay µs, reserves its hits instead (reserve.go). 0, the
	// default, denies. Other algorithms, takes and refunds ignore it.
	MaxDelay int64
	// ReservedAt, on a refund, makes it the cancellation of the hits a
	// queued request reserved at that time (Unix µs, the Decision's
	// ReservedAt): they are given back only where no later reservation
	// depends on them (see Cancel in reserve.go). 0 is a plain refund.
	ReservedAt int64
	// At, on a refund, is the time the refunded hits were decided at (their
	// Decision.At): a backend that decides on a clock of its own decides
	// the refund at At instead of placing the request's now on its clock,
	// so that a refund sent long after its hits (the per-second split's,
	// after a slow other side) gives back in their window, not the next.
	// 0 decides at now. It is not part of the counter identity.
	At int64
}
