package redisalgo

import (
	"strings"
	"sync"
)

// A fixed window's hash gets its expiry from the first plain call or
// script that writes into it in its window (PEXPIRE … NX): the expiry is
// the same for every counter of the window, so sending it with every hit,
// as one key per counter needs, would double the commands per decision.
// expiries remembers, per replica, the hashes it has sent an expiry for
// in their window, so that a plain call carries a PEXPIRE … NX only when
// this replica has not sent one yet, or again every resendExpiry-th call
// to that hash: a hash evicted mid-window and recreated by a later
// HINCRBY has no expiry, and the resend gives it one back (docs/redis.md,
// "Eviction"). A replica that restarts sends each hash's expiry once more;
// NX makes every extra one a no-op.

// resendExpiry is how many of this replica's plain calls to one hash in
// one window carry its PEXPIRE … NX at most once: 1/64 of a command per
// decision at worst, so a decision stays one command.
const resendExpiry = 64

// expiries is the set of hashes this replica has sent an expiry for, with
// the end of their window; safe for concurrent use.
type expiries struct {
	mu sync.Mutex
	// m's keys are copies: a map assignment to an existing key would
	// store the caller's string (a view of a request's reused buffer), so
	// an entry is updated through its pointer, never assigned again.
	m map[string]*expiry
	// sweepAt is the size at which the next need drops ended windows.
	sweepAt int
}

type expiry struct {
	end   int64  // the window's end (Unix µs on the master's clock)
	calls uint32 // plain calls to the hash in this window, this one included
}

// minSweep is the size below which expiries never sweeps.
const minSweep = 1024

// need reports whether this replica's plain call to hash, whose window
// ends at end, at now, must carry the hash's PEXPIRE … NX. hash may view
// a buffer that is reused later: it is copied when remembered.
func (e *expiries) need(hash string, end, now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[hash]; ok && x.end == end {
		x.calls++
		return x.calls%resendExpiry == 1
	} else if ok {
		// The name came round to another window (36⁴ windows later).
		x.end, x.calls = end, 1
		return true
	}
	if e.m == nil {
		e.m = make(map[string]*expiry)
	}
	if len(e.m) >= max(e.sweepAt, minSweep) {
		// Windows that ended are never written again by this replica's
		// clock; a lagging replica's late hits are its own to expire.
		for k, x := range e.m {
			if x.end < now {
				delete(e.m, k)
			}
		}
		e.sweepAt = 2 * len(e.m)
	}
	e.m[strings.Clone(hash)] = &expiry{end: end, calls: 1}
	return true
}

// forget drops hash, so that the next plain call to it sends its expiry
// again: the one this replica sent may not have been applied.
func (e *expiries) forget(hash string) {
	e.mu.Lock()
	delete(e.m, hash)
	e.mu.Unlock()
}

// len is how many hashes are remembered, for tests.
func (e *expiries) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}
