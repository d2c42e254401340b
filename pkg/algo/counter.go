package algo

import (
	"encoding/binary"
	"slices"
)

// A counter is the stored state that checks share. This file is its one
// definition: two checks apply to the same counter exactly when they have
// the same domain, entries (keys and values, in order), hash-tag entry,
// algorithm, period and sub-window count (Policy.Windows). The rules parser (two limits of one rule), the
// request plan, the in-process store, the deny cache and the Redis key all
// name counters through SameCounter, SharesCounter or AppendIdentity.
//
// Limit and Burst are not part of it, so raising requests_per_unit keeps the
// counts (docs/architecture.md#keys); the algorithm and period are, because they change what
// the state means. The hash-tag entry is, because it picks a different
// Redis key for the same entries. Hits and Refund are what a check does to
// its counter, not which counter it is.

// SharesCounter reports whether two limits on the same descriptor would
// count in one counter: they have the same algorithm, period and number
// of sub-windows (Windows).
func (p Policy) SharesCounter(q Policy) bool {
	return p.Algorithm == q.Algorithm && p.Period == q.Period && p.Windows() == q.Windows()
}

// TagIndex returns the index of the entry that is c's hash tag, or -1 when
// the tag is the counter's whole identity (HashTag is -1 or names no
// entry).
func (c *Check) TagIndex() int {
	if c.HashTag >= 0 && c.HashTag < len(c.Entries) {
		return c.HashTag
	}
	return -1
}

// SameCounter reports whether a and b apply to one counter.
func SameCounter(a, b *Check) bool {
	return a.Policy.SharesCounter(b.Policy) && a.TagIndex() == b.TagIndex() &&
		a.Domain == b.Domain && slices.Equal(a.Entries, b.Entries)
}

// AppendIdentity appends an encoding of the counter c applies to: the
// domain, every entry's key and value (each length-prefixed, so no two
// different descriptors encode alike), the hash-tag index, the algorithm,
// the period and, when above 1, the sub-window count. Two checks encode
// alike exactly when SameCounter holds. It allocates nothing when dst has
// room.
func (c Check) AppendIdentity(dst []byte) []byte {
	dst = appendLenString(dst, c.Domain)
	dst = binary.AppendUvarint(dst, uint64(len(c.Entries)))
	for _, e := range c.Entries {
		dst = appendLenString(dst, e.Key)
		dst = appendLenString(dst, e.Value)
	}
	dst = binary.AppendVarint(dst, int64(c.TagIndex()))
	dst = append(dst, byte(c.Policy.Algorithm))
	dst = binary.AppendVarint(dst, c.Policy.Period)
	if n := c.Policy.Windows(); n > 1 {
		// The period's varint ends itself, so this optional suffix keeps
		// every identity distinct.
		dst = binary.AppendUvarint(dst, uint64(n))
	}
	return dst
}

func appendLenString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// SharedCounters reports whether two of checks apply to one counter.
func SharedCounters(checks []Check) bool {
	for i := 1; i < len(checks); i++ {
		for j := range i {
			if SameCounter(&checks[i], &checks[j]) {
				return true
			}
		}
	}
	return false
}

// Merge returns one check per counter of checks, in order of first
// appearance, and owner, where owner[i] is the index in merged of the check
// that checks[i] became part of. It returns nil, nil when no two checks
// share a counter, which is the common case and allocates nothing.
//
// Evaluated apart, two checks on one counter would both read the same
// stored state and the second write would lose the first's hits: a request
// could then put twice its hits through a limit. Merged, their hits are
// summed (a refund counts negative, and a negative sum is a refund), and
// the sum is tested against the most restrictive of their policies: the
// smallest Limit, then the smallest Capacity. For fixed_window,
// sliding_window and sliding_log the stored state does not depend on the
// limit, so admitting under the smallest limit is admitting under every
// one; every check on the counter reports the merged decision. The merged
// check is a charge when any consuming check on the counter is (and the
// sum consumes): counting a charge is the one promise that must hold.
func Merge(checks []Check) (merged []Check, owner []int) {
	if !SharedCounters(checks) {
		return nil, nil
	}
	owner = make([]int, len(checks))
	net := make([]int64, 0, len(checks))
	for i := range checks {
		c := &checks[i]
		j := slices.IndexFunc(merged, func(m Check) bool { return SameCounter(&m, c) })
		if j < 0 {
			merged = append(merged, *c)
			// Charge is or-ed in from the consuming checks below.
			merged[len(merged)-1].Charge = false
			net = append(net, 0)
			j = len(merged) - 1
		} else {
			if stricter(c.Policy, merged[j].Policy) {
				merged[j].Policy = c.Policy
			}
			// Queue mode only when every check on the counter may wait.
			merged[j].MaxDelay = min(merged[j].MaxDelay, c.MaxDelay)
		}
		owner[i] = j
		if c.Refund {
			net[j] -= max(c.Hits, 0)
		} else {
			net[j] += max(c.Hits, 0)
			merged[j].Charge = merged[j].Charge || c.Charge
		}
	}
	for j := range merged {
		merged[j].Hits, merged[j].Refund, merged[j].Charge = net[j], false, merged[j].Charge && net[j] > 0
		if net[j] < 0 {
			merged[j].Hits, merged[j].Refund = -net[j], true
		}
	}
	return merged, owner
}

// stricter reports whether p admits less than q on the same counter.
func stricter(p, q Policy) bool {
	if p.Limit != q.Limit {
		return p.Limit < q.Limit
	}
	return p.Capacity() < q.Capacity()
}

// DefaultMaxCost is the default bound on the Cost of one request, and of
// one Redis script call that merges several requests. At about 2 µs of
// Redis time per sliding-log entry it keeps a script call near a
// millisecond, so one request cannot stall Redis for everyone else.
const DefaultMaxCost int64 = 1000

// Cost returns how many state writes c can cause: one for its counter,
// and for a sliding log one per logged hit, which is one sorted-set member
// each (at most Limit: more hits than that are denied and write nothing;
// a charge logs all of its hits).
// A request's cost is the sum over its checks; it bounds the time a script
// runs and the memory one request can claim.
func (c *Check) Cost() int64 {
	if c.Policy.Algorithm == SlidingLog {
		if c.Charge && !c.Refund {
			return max(1, c.Hits)
		}
		return max(1, min(c.Hits, c.Policy.Limit))
	}
	return 1
}
