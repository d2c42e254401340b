package redisalgo

// What the tests read of a backend's inner state, kept out of the
// production types: the calls queued in the batchers, the tracked clock's
// reading, and the hashes the expiry set remembers.

import (
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/shardmap"
)

// topologyPending returns the calls queued in t's batchers.
func topologyPending(t topology) int {
	switch t := t.(type) {
	case *oneMaster:
		return t.pending()
	case *cluster:
		return t.nodes.pending()
	}
	return 0
}

func (t *oneMaster) pending() int {
	if t.batch == nil {
		return 0
	}
	return t.batch.pending()
}

// pending returns the calls queued on every node (for tests).
func (ns *nodes) pending() int {
	ns.mu.Lock()
	all := slices.Clone(ns.all)
	ns.mu.Unlock()
	total := 0
	for _, n := range all {
		if n.batch != nil {
			total += n.batch.pending()
		}
	}
	return total
}

// pending returns the number of queued calls (tests use it to know that
// callers have enqueued).
func (b *batcher) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}

// now returns Redis's time (Unix µs) at the local instant at, and whether
// the clock was ever measured (before, now is at's own).
func (c *redisClock) now(at time.Time) (now int64, ok bool) {
	r := c.cur.Load()
	if r == nil {
		return at.UnixMicro(), false
	}
	return r.anchor.redis + at.Sub(r.anchor.local).Microseconds(), true
}

// len is how many hashes are remembered, for tests.
func (e *expiries) len() int {
	n := 0
	for i := range shardmap.Count {
		sh := e.m.Shard(i)
		sh.Mu.Lock()
		n += len(sh.M)
		sh.Mu.Unlock()
	}
	return n
}
