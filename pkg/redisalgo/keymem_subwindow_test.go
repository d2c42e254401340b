package redisalgo

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// subWindowCounts are the sub-window counts BENCHMARKS.md reports memory
// for: 1 (the two-window estimate, packed as one integer) and the
// issue's 4, 10 and 60, with the default between.
var subWindowCounts = []int64{1, 4, 10, algo.DefaultSubWindows, 60}

// busyMemory is keyMemory for a sliding window of 200 per second in n
// sub-windows under steady load: every one of its n+1 sub-windows holds
// ⌈200/n⌉ hits (the two-window estimate: 200 and 200). The values are
// spelt by subWindowsValue and windowValue, which the differential test
// holds to what apply.lua writes, and SET for a minute, as the script sets
// them, so no fill races a sub-window's end.
func busyMemory(tb testing.TB, keys int, n int64) (perKey float64, sample string) {
	tb.Helper()
	client := redistest.Standalone(tb).Client(tb)
	p := algo.Policy{Algorithm: algo.SlidingWindow, Limit: 200, Period: algo.Second, SubWindows: n}
	now := time.Now().UnixMicro()
	st := algo.State{Time: now - now%algo.Second, Count: 200, Prev: 200}
	value := windowValue(algo.SlidingWindow, p.Period, st)
	if n > 1 {
		st, _ = algo.Step(p, algo.State{}, now, 1, false)
		st.Subs = make([]int64, n+1)
		for i := range st.Subs {
			st.Subs[i] = (200 + n - 1) / n
		}
		value = subWindowsValue(p, st)
	}
	name := func(i int) string {
		return string(keyOf(algo.Check{Domain: memDomain, Entries: []algo.Entry{{Key: memKey, Value: memUser(i)}}, HashTag: -1, Policy: p}))
	}
	write := func(ctx context.Context, from, to int) error {
		pipe := client.Pipeline()
		for i := from; i < to; i++ {
			pipe.Set(ctx, name(i), value, time.Minute)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	before := warmUp(tb, client, func(ctx context.Context) error { return write(ctx, keys, keys+1) })
	fill(tb, keys, 4, write)
	return perKeyGrowth(tb, client, keys+1, before, keys), name(0) + " = " + value
}

// TestSubWindowMemory bounds what sub-windows cost Redis per key, busy at
// 200/s (every sub-window holding hits): at most the two-window key plus
// 4 bytes per extra sub-window, and the default's key at most 80 bytes
// more (its value fits the 44 bytes Redis keeps inside the object).
// BenchmarkSubWindowMemory reports the figures.
func TestSubWindowMemory(t *testing.T) {
	const keys = 5000
	base, _ := busyMemory(t, keys, 1)
	for _, n := range []int64{algo.DefaultSubWindows, 60} {
		got, sample := busyMemory(t, keys, n)
		t.Logf("N=%d: %.1f bytes/key (%s); two windows %.1f", n, got, sample, base)
		if got > base+4*float64(n-1) || (n == algo.DefaultSubWindows && got > base+80) {
			t.Errorf("N=%d costs %.1f bytes/key, two windows %.1f", n, got, base)
		}
	}
}

// BenchmarkSubWindowMemory produces BENCHMARKS.md's bytes per key of a
// sliding window in N sub-windows, with one hit (written by the script,
// as BenchmarkKeyMemory writes the other algorithms) and busy at 200/s.
// It ignores b.N; run it with -benchtime=1x.
func BenchmarkSubWindowMemory(b *testing.B) {
	const keys = 100_000
	for _, n := range subWindowCounts {
		p := algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1, Period: algo.Minute, SubWindows: n}
		b.Run("one_hit_N="+itoa(n), func(b *testing.B) {
			per, key := keyMemory(b, keys, p)
			b.ReportMetric(per, "bytes/key")
			b.Logf("%q: %.1f bytes/key", key, per)
		})
		b.Run("busy_N="+itoa(n), func(b *testing.B) {
			per, key := busyMemory(b, keys, n)
			b.ReportMetric(per, "bytes/key")
			b.Logf("%s: %.1f bytes/key", key, per)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// BenchmarkSubWindowScript measures Redis's CPU per decision of a
// sliding window in N sub-windows on 100 busy counters (each hit about
// every 20 ms, so at 30 sub-windows of a second most hold hits): the Lua
// cost of reading, stepping and writing N+1 counts. Run it with
// -benchtime=2s or more, so that the counters fill their sub-windows.
func BenchmarkSubWindowScript(b *testing.B) {
	client := redistest.SharedStandalone(b).Client(b)
	for _, n := range subWindowCounts {
		b.Run("N="+itoa(n), func(b *testing.B) {
			p := algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1 << 20, Period: algo.Second, SubWindows: n}
			scriptLoad(b, client, p, 10, 100)
		})
	}
}
