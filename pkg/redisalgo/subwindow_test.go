package redisalgo

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestSubWindowKeysNeverMix: the two-window sliding_window (N = 1) keeps
// its key and value layout, so states written before sub-windows existed
// read on; a limit in N ≥ 2 sub-windows counts in a key of its own, so a
// reload that changes N starts a fresh count rather than misreading the
// other layout; and a value of the other layout found under a key reads as
// no state, never as counts.
func TestSubWindowKeysNeverMix(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	b := newBackend(t, client, Options{KeyPrefix: redistest.KeyPrefix(t), CallerTime: true})
	ctx := context.Background()
	at := time.UnixMicro(luaT0 + 300_000)
	check := func(n int64, hits int64) algo.Check {
		return algo.Check{Domain: "d", Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1, Hits: hits,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: algo.Second, SubWindows: n}}
	}
	apply := func(c algo.Check) algo.Decision {
		t.Helper()
		d, err := b.Apply(ctx, at, []algo.Check{c})
		if err != nil {
			t.Fatal(err)
		}
		return d[0]
	}
	// A state the two-window script wrote: the packed "<index><count><n><m>".
	oldKey := string(AppendKey([]byte(b.keyPrefix), check(1, 1), DefaultCounterHashes))
	oldValue := windowValue(algo.SlidingWindow, algo.Second, algo.State{Time: luaT0 - luaT0%algo.Second, Count: 7})
	if err := client.Set(ctx, oldKey, oldValue, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if d := apply(check(1, 1)); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("two-window limit on its old state %q: %+v, want 7 + 1 counted (remaining 2)", oldValue, d)
	}
	if d := apply(check(algo.DefaultSubWindows, 1)); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("limit in sub-windows beside the old key: %+v, want a fresh count (remaining 9)", d)
	}
	newKey := string(AppendKey([]byte(b.keyPrefix), check(algo.DefaultSubWindows, 1), DefaultCounterHashes))
	if newKey == oldKey {
		t.Fatalf("N=1 and N=%d share the key %q", algo.DefaultSubWindows, newKey)
	}
	if v := client.Get(ctx, oldKey).Val(); v != windowValue(algo.SlidingWindow, algo.Second, algo.State{Time: luaT0 - luaT0%algo.Second, Count: 8}) {
		t.Fatalf("old key now %q: the sub-window limit touched it", v)
	}
	// The other layout under a sub-window key (or garbage) reads as no
	// state: the limit admits its whole capacity from scratch.
	for _, v := range []string{oldValue, "1:2:3", "or5ejno:2", "or5ejno:1" + "7777777777777777777777777777777777777777"} {
		if err := client.Set(ctx, newKey, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if d := apply(check(algo.DefaultSubWindows, 0)); !d.Allowed || d.Remaining != 10 {
			t.Errorf("value %q under a sub-window key: %+v, want no state (remaining 10)", v, d)
		}
		if _, err := DecodeState(check(algo.DefaultSubWindows, 0).Policy, v); err == nil {
			t.Errorf("DecodeState accepts %q as sub-windows", v)
		}
	}
}
