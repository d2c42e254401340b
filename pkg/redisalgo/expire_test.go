package redisalgo

import (
	"fmt"
	"testing"
)

// TestExpiriesNeed: which plain calls to a hash carry its PEXPIRE … NX.
// A step is one call to need, or a forget when forget is set.
func TestExpiriesNeed(t *testing.T) {
	const end, now = 2000, 1000
	type step struct {
		hash   string
		end    int64
		forget bool
		want   bool
	}
	// calls returns n calls of hash in the window ending at end, the
	// first of which needs when first: afterwards every resendExpiry-th
	// one after the last that needed does again.
	calls := func(hash string, end int64, n int, first bool) []step {
		var s []step
		for i := range n {
			s = append(s, step{hash: hash, end: end, want: i%resendExpiry == 0 && (first || i > 0)})
		}
		return s
	}
	join := func(parts ...[]step) []step {
		var s []step
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first needs, then every resendExpiry-th", calls("h", end, 3*resendExpiry+1, true)},
		{"a new window needs", join(
			calls("h", end, 5, true),
			calls("h", end+1000, 5, true),
			calls("h", end, 5, true), // an end that differs again is a new window too
		)},
		{"the count starts again in a new window", join(
			calls("h", end, resendExpiry-1, true),
			calls("h", end+1000, resendExpiry+1, true),
		)},
		{"forget makes the next need", join(
			calls("h", end, 3, true),
			[]step{{hash: "h", forget: true}},
			calls("h", end, resendExpiry+1, true),
		)},
		{"forgetting an unknown hash is harmless", join(
			[]step{{hash: "x", forget: true}},
			calls("h", end, 2, true),
			[]step{{hash: "x", forget: true}},
			calls("h", end, 2, false),
		)},
		{"hashes count apart", join(
			calls("a", end, 2, true),
			calls("b", end, 2, true),
			calls("a", end, resendExpiry-2, false),
			[]step{{hash: "a", end: end, want: true}, {hash: "b", end: end, want: false}},
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e expiries
			for i, s := range tc.steps {
				if s.forget {
					e.forget(s.hash)
					continue
				}
				if got := e.need(s.hash, s.end, now); got != s.want {
					t.Fatalf("step %d: need(%q, end %d) = %v, want %v", i, s.hash, s.end, got, s.want)
				}
			}
		})
	}
}

// TestExpiriesSweep: once the map reaches its size bound (minSweep, then
// twice what the last sweep kept), the next new hash drops the hashes
// whose window ended and keeps the live ones, which go on counting
// towards their resend.
func TestExpiriesSweep(t *testing.T) {
	const now = 1_000_000
	for _, tc := range []struct {
		name        string
		ended, live int
		// wantLen is the size after the call that may sweep.
		wantLen int
	}{
		{"below the bound nothing goes", minSweep/2 - 1, minSweep / 2, minSweep},
		{"at the bound ended windows go", minSweep / 2, minSweep / 2, minSweep/2 + 1},
		{"all ended", minSweep, 0, 1},
		{"all live", 0, minSweep, minSweep + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e expiries
			for i := range tc.ended {
				e.need(fmt.Sprintf("ended%d", i), now-1, now-2)
			}
			for i := range tc.live {
				e.need(fmt.Sprintf("live%d", i), now+1000, now-2)
			}
			if !e.need("new", now+1000, now) {
				t.Fatal("a new hash did not need its expiry")
			}
			if n := e.len(); n != tc.wantLen {
				t.Fatalf("%d hashes remembered, want %d", n, tc.wantLen)
			}
			// A live hash is still remembered: its next call needs no
			// expiry. An ended one that was dropped needs one if called
			// again (its replica's clock lagging).
			if tc.live > 0 && e.need("live0", now+1000, now) {
				t.Error("a live hash was forgotten by the sweep")
			}
			if swept := tc.wantLen < tc.ended+tc.live+1; tc.ended > 0 && e.need("ended0", now-1, now) != swept {
				t.Errorf("ended0 needs %v, want %v (swept %v)", !swept, swept, swept)
			}
		})
	}
	t.Run("the bound doubles what a sweep kept", func(t *testing.T) {
		var e expiries
		for i := range minSweep {
			e.need(fmt.Sprintf("live%d", i), now+1000, now)
		}
		e.need("trigger", now+1000, now) // sweeps, keeps all: the next bound is 2·(minSweep)
		for i := range minSweep - 1 {
			e.need(fmt.Sprintf("ended%d", i), now-1, now-2)
		}
		// 2·minSweep entries: below the doubled bound nothing went.
		if n := e.len(); n != 2*minSweep {
			t.Fatalf("%d hashes remembered, want %d", n, 2*minSweep)
		}
		e.need("next", now+1000, now) // at the bound: the ended go
		if n := e.len(); n != minSweep+2 {
			t.Fatalf("after the second sweep %d hashes remembered, want %d", n, minSweep+2)
		}
	})
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
