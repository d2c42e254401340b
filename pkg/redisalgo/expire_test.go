package redisalgo

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/shardmap"
)

// TestExpiriesNeed: which plain calls to a hash carry its PEXPIRE … NX:
// the first in a window, then the first resendExpiry or more after the
// last that did, however few calls came between (issue 39: a hash
// recreated after an eviction gets its expiry back by time, not only
// after many calls). A step is one call to need at now, or a forget.
func TestExpiriesNeed(t *testing.T) {
	const end, t0 = 100 * algo.Second, 10 * algo.Second
	type step struct {
		hash   string
		end    int64
		now    int64
		forget bool
		want   bool
	}
	call := func(hash string, end, now int64, want bool) step {
		return step{hash: hash, end: end, now: now, want: want}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first needs, the next within resendExpiry do not", []step{
			call("h", end, t0, true),
			call("h", end, t0+1, false),
			call("h", end, t0+resendExpiry-1, false),
		}},
		{"a call resendExpiry after the last sent needs, however few came between", []step{
			call("h", end, t0, true),
			call("h", end, t0+resendExpiry, true),
			call("h", end, t0+resendExpiry+1, false),
			call("h", end, t0+3*resendExpiry, true),
		}},
		{"many calls within resendExpiry need once", func() []step {
			s := []step{call("h", end, t0, true)}
			for i := range 1000 {
				s = append(s, call("h", end, t0+int64(i), false))
			}
			return s
		}()},
		{"a new window needs", []step{
			call("h", end, t0, true),
			call("h", end+algo.Second, t0+1, true),
			call("h", end, t0+2, true), // an end that differs again is a new window too
			call("h", end, t0+3, false),
		}},
		{"forget makes the next need", []step{
			call("h", end, t0, true),
			{hash: "h", forget: true},
			call("h", end, t0+1, true),
			call("h", end, t0+2, false),
		}},
		{"forgetting an unknown hash is harmless", []step{
			{hash: "x", forget: true},
			call("h", end, t0, true),
			{hash: "x", forget: true},
			call("h", end, t0+1, false),
		}},
		{"hashes are timed apart", []step{
			call("a", end, t0, true),
			call("b", end, t0+resendExpiry/2, true),
			call("a", end, t0+resendExpiry, true),
			call("b", end, t0+resendExpiry, false),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e expiries
			e.init()
			for i, s := range tc.steps {
				if s.forget {
					e.forget(s.hash)
					continue
				}
				if got := e.need(s.hash, s.end, s.now); got != s.want {
					t.Fatalf("step %d: need(%q, end %d) at %d = %v, want %v", i, s.hash, s.end, s.now, got, s.want)
				}
			}
		})
	}
}

// TestExpiriesSweep: a sweep drops the hashes whose window ended and keeps
// the live ones, whose next call within resendExpiry needs nothing; a
// shard that reaches its bound (minSweep, then twice what it held) starts
// a sweep by itself, off the caller's path.
func TestExpiriesSweep(t *testing.T) {
	const now = 1_000_000
	t.Run("ended go, live stay", func(t *testing.T) {
		var e expiries
		e.init()
		const ended, live = 500, 300
		for i := range ended {
			e.need(fmt.Sprintf("ended%d", i), now-1, now-2)
		}
		for i := range live {
			e.need(fmt.Sprintf("live%d", i), now+1000, now-2)
		}
		// Sweeps the shards queued meanwhile drop nothing: no window had
		// ended at their now.
		e.sweepQueued()
		for i := range shardmap.Count {
			e.sweep(i, now)
		}
		if n := e.len(); n != live {
			t.Fatalf("%d hashes remembered after the sweep, want the %d live", n, live)
		}
		if e.need("live0", now+1000, now) {
			t.Error("a live hash was forgotten by the sweep")
		}
		if !e.need("ended0", now-1, now) {
			t.Error("an ended hash is still remembered")
		}
	})
	t.Run("a shard at its bound sweeps by itself", func(t *testing.T) {
		var e expiries
		e.init()
		e.start()
		const total = 4 * shardmap.Count * minSweep
		for i := range total {
			e.need(fmt.Sprintf("ended%d", i), now-1, now)
		}
		e.stop()
		// Every shard reached minSweep, and its first sweep dropped all
		// it held.
		if n := e.len(); n > total-shardmap.Count*minSweep {
			t.Fatalf("%d of %d ended hashes remembered: the shards did not sweep", n, total)
		}
	})
}

// TestExpiriesNeedNeverSweeps (issue 39, item 7): the call that brings a
// shard to its bound does not sweep it on the caller's path: the ended
// windows are all still remembered when it returns, and the shard waits in
// the sweeper's queue, whose sweep drops them. (Before, need swept under
// the set's one lock, visiting every hash remembered, on the request's
// path.)
func TestExpiriesNeedNeverSweeps(t *testing.T) {
	const now = 1_000_000
	var e expiries
	e.init() // no sweeper: what need queues stays queued
	shard := e.m.IndexString("ended0")
	n := 0
	for i := 0; n < minSweep; i++ {
		name := fmt.Sprintf("ended%d", i)
		if e.m.IndexString(name) != shard {
			continue
		}
		e.need(name, now-1, now)
		n++
	}
	if got := e.len(); got != minSweep {
		t.Fatalf("%d hashes remembered after the call that reached the bound, want all %d: need swept on the caller's path", got, minSweep)
	}
	if swept := e.sweepQueued(); swept != 1 {
		t.Fatalf("%d shards queued for the sweeper, want the 1 that reached its bound", swept)
	}
	if got := e.len(); got != 0 {
		t.Errorf("%d hashes remembered after the queued sweep, want 0 (all their windows ended)", got)
	}
}

// TestExpiriesShardsDoNotWait (issue 39, item 7): a plain call to one hash
// does not wait for a call that holds another shard of the set. (Before,
// one lock served every hash: this test's call waited until the deadline
// below.) The deadline only bounds a hung test; nothing is timed.
func TestExpiriesShardsDoNotWait(t *testing.T) {
	var e expiries
	e.init()
	held := e.m.IndexString("held")
	other := ""
	for i := 0; other == ""; i++ {
		if name := fmt.Sprintf("other%d", i); e.m.IndexString(name) != held {
			other = name
		}
	}
	sh := e.m.Shard(held)
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	done := make(chan bool, 1)
	go func() { done <- e.need(other, 100*algo.Second, algo.Second) }()
	select {
	case need := <-done:
		if !need {
			t.Error("the first call to a hash did not need its expiry")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("need on one shard waited 30s for another shard's lock")
	}
}

// sweepQueued sweeps, on the caller's goroutine, the shards queued and not
// yet taken by a sweeper, and reports how many it swept.
func (e *expiries) sweepQueued() int {
	n := 0
	for {
		select {
		case o := <-e.queue:
			e.sweep(o.i, o.now)
			n++
		default:
			return n
		}
	}
}

// TestExpiriesCopiesHash: need is given a view of a keyBuf (as
// Backend.group does), whose bytes are overwritten when the buffer is
// reused; what it remembers must be a copy, on the first call and on every
// later one (a Go map assignment to a present string key stores the key
// given), so the hash is still known by its name afterwards and the
// overwritten bytes name nothing remembered.
func TestExpiriesCopiesHash(t *testing.T) {
	now := t0.UnixMicro()
	var kb keyBuf
	alice := userCheck("copy", "alice", 10, 1)
	end := now + windowLeft(alice.Policy.Period, now)
	kb.add("", alice, now, DefaultCounterHashes)
	view := kb.view(0)
	name, _ := counter(alice, now)
	if view != name {
		t.Fatalf("the view is %q, want %q", view, name)
	}
	var e expiries
	e.init()
	if !e.need(view, end, now) {
		t.Fatal("the first call did not need its expiry")
	}
	// The second call finds the hash remembered and updates its count,
	// given the view again: the remembered name must stay the copy.
	if e.need(view, end, now) {
		t.Fatal("the second call needed an expiry")
	}
	// Reuse the buffer for a hash of another domain, of the same length,
	// so that the view now reads the other name.
	kb.reset()
	other := alice
	other.Domain = "cpoy"
	kb.add("", other, now, DefaultCounterHashes)
	if view == name {
		t.Fatalf("the view still reads %q after the buffer's reuse: the test does not overwrite it", name)
	}
	if e.need(name, end, now) {
		t.Errorf("%q was not remembered after the buffer it was viewed in was reused", name)
	}
	if !e.need(view, end, now) {
		t.Errorf("%q, written over the remembered view, was taken as remembered", view)
	}
	if n := e.len(); n != 2 {
		t.Errorf("%d hashes remembered, want 2", n)
	}
}

// BenchmarkExpiriesNeed is the plain path's bookkeeping of expiries, every
// plain call's, from parallel requests on many hashes: run it with -cpu
// 1,2,4,8 to see what a single lock would cost as cores are added.
func BenchmarkExpiriesNeed(b *testing.B) {
	const hashes = 4096
	names := make([]string, hashes)
	for i := range names {
		names[i] = fmt.Sprintf("r3{bench:f1h0:%d}a4da", i)
	}
	var e expiries
	e.init()
	const end = 100 * algo.Second
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			e.need(names[i%hashes], end, int64(i%1000))
		}
	})
}
