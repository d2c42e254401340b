package algo

// Peeked is a counter's stored state as a backend read it without
// changing it (a Peek), for tools that show where a limit stands.
type Peeked struct {
	// Key names the counter in its store: the Redis key, or "" for the
	// in-process store, which keeps only a hash of the identity.
	Key string
	// Field is, for a fixed window in Redis, the counter's field in the
	// hash Key names (its window's hash); else "".
	Field string
	// Exists reports whether the store held live state for the counter;
	// State is the zero State when it did not.
	Exists bool
	State  State
	// TTL is how many µs the stored state has left before it expires; -1
	// when the store keeps it without expiry, 0 when there is none.
	TTL int64
	// Now is the time (Unix µs) the state was read at, by the store's
	// clock (Redis TIME): the time Decision judges it at.
	Now int64
}

// Decision returns the check-only decision (hits 0) of the peeked state
// under p: what remains and when the limit resets, as a request that
// consumes nothing would be told. It changes nothing.
func (k Peeked) Decision(p Policy) Decision {
	_, d := Step(p, k.State, k.Now, 0, false)
	return d
}
