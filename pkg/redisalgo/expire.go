package redisalgo

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/shardmap"
)

// A fixed window's hash gets its expiry from the first plain call or
// script that writes into it in its window (PEXPIRE … NX): the expiry is
// the same for every counter of the window, so sending it with every hit,
// as one key per counter needs, would double the commands per decision.
// expiries remembers, per replica, the hashes it has sent an expiry for
// in their window and when, so that a plain call carries a PEXPIRE … NX
// only when this replica has not sent one yet, or sent its last one
// resendExpiry or more before: a hash evicted mid-window and recreated by
// a later HINCRBY has no expiry, and the resend gives it one back within
// resendExpiry of the recreation while calls to it go on, however few they
// are (docs/redis.md, "Eviction"). A replica that restarts sends each
// hash's expiry once more; NX makes every extra one a no-op.
//
// Every plain call asks (need), so the set is a shardmap: calls to
// different hashes rarely wait for each other (a single lock made every
// plain call of every request queue on it), and dropping the windows that
// ended (sweep) runs on the set's sweeper goroutine, under one shard's
// lock at a time, never on a request's path: need only queues a shard for
// it, without waiting. The sweeper parks on its queue between sweeps, so
// an idle Backend's costs no wake-up; Close stops it.

// resendExpiry is how long after this replica's last PEXPIRE … NX to a
// hash its next plain call to it in the window carries another: at most
// one command a second per hash and replica, whatever the calls' rate.
const resendExpiry = algo.Second

// expiries is the set of hashes this replica has sent an expiry for, with
// the end of their window and when it sent the last; safe for concurrent
// use once init ran.
type expiries struct {
	// m's keys are copies: a map assignment to an existing key would
	// store the caller's string (a view of a request's reused buffer), so
	// an entry is updated through its pointer, never assigned again.
	m shardmap.Map[*expiry]
	// sweepAt[i] is the size at which shard i's next new hash starts a
	// sweep of its windows that ended; guarded by the shard's lock.
	sweepAt [shardmap.Count]int
	// sweeping[i] is set from when shard i is queued for a sweep until
	// that sweep ends, so that a shard is queued once at a time and the
	// queue never fills.
	sweeping [shardmap.Count]atomic.Bool
	// queue carries the shards to sweep, and the time to sweep them at, to
	// the sweeper (run); it holds every shard at once. It is never
	// closed: a request still running after Close may queue a shard.
	queue chan sweepOrder
	// quit ends the sweeper (stop), once; ran is closed when it has
	// returned, nil until start.
	quit     chan struct{}
	stopOnce sync.Once
	ran      chan struct{}
}

// sweepOrder asks the sweeper to drop shard i's windows ended before now.
type sweepOrder struct {
	i   int
	now int64
}

type expiry struct {
	end  int64 // the window's end (Unix µs on the master's clock)
	sent int64 // when this replica last sent the PEXPIRE … NX (same clock)
}

// minSweep is the size below which a shard never sweeps.
const minSweep = 64

// init makes the set ready for need; until start, sweeps only queue.
func (e *expiries) init() {
	e.m.Init()
	e.queue = make(chan sweepOrder, shardmap.Count)
	e.quit = make(chan struct{})
}

// start starts the sweeper; stop ends it.
func (e *expiries) start() {
	e.ran = make(chan struct{})
	go e.run()
}

// run sweeps the shards queued until stop.
func (e *expiries) run() {
	defer close(e.ran)
	for {
		select {
		case o := <-e.queue:
			e.sweep(o.i, o.now)
		case <-e.quit:
			return
		}
	}
}

// stop ends the sweeper and waits for it. It may be called more than
// once. Shards queued afterwards are never swept: the set is no longer
// used.
func (e *expiries) stop() {
	e.stopOnce.Do(func() { close(e.quit) })
	if e.ran != nil {
		<-e.ran
	}
}

// need reports whether this replica's plain call to hash, whose window
// ends at end, at now, must carry the hash's PEXPIRE … NX. hash may view
// a buffer that is reused later: it is copied when remembered.
func (e *expiries) need(hash string, end, now int64) bool {
	i := e.m.IndexString(hash)
	sh := e.m.Shard(i)
	sh.Mu.Lock()
	if x, ok := sh.M[hash]; ok {
		send := x.end != end || now-x.sent >= resendExpiry
		if send {
			// A resend, or the name came round to another window (36⁴
			// windows later).
			x.end, x.sent = end, now
		}
		sh.Mu.Unlock()
		return send
	}
	sh.M[strings.Clone(hash)] = &expiry{end: end, sent: now}
	sweep := len(sh.M) >= max(e.sweepAt[i], minSweep)
	if sweep {
		// Not again until the shard doubles, whatever this sweep finds.
		e.sweepAt[i] = 2 * len(sh.M)
	}
	sh.Mu.Unlock()
	if sweep && e.sweeping[i].CompareAndSwap(false, true) {
		// Never blocks: a shard is queued at most once at a time, and
		// the queue holds them all.
		e.queue <- sweepOrder{i, now}
	}
	return true
}

// sweep drops shard i's hashes whose window ended before now: windows
// that ended are never written again by this replica's clock; a lagging
// replica's late hits are its own to expire.
func (e *expiries) sweep(i int, now int64) {
	defer e.sweeping[i].Store(false)
	sh := e.m.Shard(i)
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	for k, x := range sh.M {
		if x.end < now {
			delete(sh.M, k)
		}
	}
	e.sweepAt[i] = 2 * len(sh.M)
}

// forget drops hash, so that the next plain call to it sends its expiry
// again: the one this replica sent may not have been applied.
func (e *expiries) forget(hash string) {
	sh := e.m.Shard(e.m.IndexString(hash))
	sh.Mu.Lock()
	delete(sh.M, hash)
	sh.Mu.Unlock()
}
