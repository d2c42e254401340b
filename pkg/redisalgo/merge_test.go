package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// limits returns n checks of one hit each (their values do not matter to
// merge).
func limits(n int) []algo.Check {
	checks := make([]algo.Check, n)
	for i := range checks {
		checks[i] = algo.Check{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: 1}, Hits: 1}
	}
	return checks
}

// typedCall returns the call of checks, all on key, in slot.
func typedCall(key string, slot int, checks ...algo.Check) *scriptCall {
	keys := make([]string, len(checks))
	for i := range keys {
		keys[i] = key
	}
	sc := new(scriptCall)
	fields := make([]string, len(keys))
	for i := range fields {
		fields[i] = fmt.Sprintf("%s/%d", key, i)
	}
	sc.set(nil, slot, keys, fields, 0, checks)
	return sc
}

// mergedKeys returns each command's keys, as strings.
func mergedKeys(t *testing.T, cmds []redis.Cmder) []string {
	t.Helper()
	var out []string
	for _, c := range cmds {
		args := c.Args()
		n := args[2].(int)
		keys := ""
		for _, k := range args[3 : 3+n] {
			keys += *k.(*string)
		}
		out = append(out, keys)
	}
	return out
}

// TestMergeBoundsCost: calls join a merged command only while its summed
// cost stays within the bound, so no merged script runs much longer than
// one request may; a call above the bound goes alone.
func TestMergeBoundsCost(t *testing.T) {
	ctx := context.Background()
	log := func(hits int64) algo.Check {
		return algo.Check{Policy: algo.Policy{Algorithm: algo.SlidingLog, Limit: 10_000, Period: algo.Minute}, Hits: hits}
	}
	calls := []*scriptCall{
		typedCall("a", 0, log(400)), typedCall("b", 0, log(400)), typedCall("c", 0, log(400)),
		typedCall("d", 0, log(5000)), typedCall("e", 0, log(100), log(100)), typedCall("f", 0, log(1)),
	}
	var m merger
	cmds := m.merge(ctx, calls, 1000)
	defer m.split()
	// Keys per command: a+b (800), c alone (c+d would be 5400), d alone
	// (5000, above the bound), then e+f (201).
	if got, want := mergedKeys(t, cmds), []string{"ab", "c", "d", "eef"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged commands carry keys %v, want %v", got, want)
	}
	for i, mc := range m.merged {
		var cost int64
		for _, c := range mc.calls {
			cost += c.cost
		}
		if cost > 1000 && len(mc.calls) > 1 {
			t.Errorf("command %d merges calls costing %d, above 1000", i, cost)
		}
	}
	if got := calls[3].cost; got != 5000 {
		t.Errorf("cost of a sliding-log call of 5000 hits = %d, want 5000 (algo.Check.Cost)", got)
	}
}

// TestMergeGroupsBySlot: calls merge per slot as the calls carry it
// (computed once, when the request was grouped), never one the merger
// computes again: the slots given here are not their keys' slots. Slots
// come out in order, each slot's calls in queue order, and calls resent
// as EVAL after NOSCRIPT merge only with each other.
func TestMergeGroupsBySlot(t *testing.T) {
	ctx := context.Background()
	evalCall := func(key string, slot int) *scriptCall {
		c := typedCall(key, slot, limits(1)...)
		c.eval = true
		return c
	}
	tests := []struct {
		name  string
		calls []*scriptCall
		want  []string // keys per command
		names []any    // command names
	}{
		{"one slot", []*scriptCall{typedCall("x", 0, limits(1)...), typedCall("y", 0, limits(2)...)}, []string{"xyy"}, []any{argEvalSHA}},
		{"two slots", []*scriptCall{typedCall("x", 9, limits(1)...), typedCall("y", 2, limits(1)...), typedCall("z", 9, limits(1)...)}, []string{"y", "xz"}, []any{argEvalSHA, argEvalSHA}},
		{"eval apart", []*scriptCall{evalCall("x", 0), typedCall("y", 0, limits(1)...), evalCall("z", 0)}, []string{"y", "xz"}, []any{argEvalSHA, argEval}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m merger
			cmds := m.merge(ctx, tt.calls, algo.DefaultMaxCost)
			defer m.split()
			if got := mergedKeys(t, cmds); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("commands carry keys %v, want %v", got, tt.want)
			}
			for i, c := range cmds {
				if i < len(tt.names) && c.Args()[0] != tt.names[i] {
					t.Errorf("command %d is %v, want %v", i, c.Args()[0], tt.names[i])
				}
			}
		})
	}
}

// TestMergeSplitsReply: merge encodes the calls into one command whose keys
// and arguments come in call order, and split hands each call its share of
// the reply, or the command's error.
func TestMergeSplitsReply(t *testing.T) {
	ctx := context.Background()
	a, b := typedCall("a", 0, limits(1)...), typedCall("b", 0, limits(2)...)
	var m merger
	cmds := m.merge(ctx, []*scriptCall{a, b}, algo.DefaultMaxCost)
	if len(cmds) != 1 {
		t.Fatalf("merge gave %d commands, want one merged call", len(cmds))
	}
	merged := cmds[0].(*redis.IntSliceCmd)
	args := merged.Args()
	if args[0] != argEvalSHA || args[1] != argSHA || args[2] != 3 || *args[3].(*string) != "a" || *args[4].(*string) != "b" || *args[5].(*string) != "b" {
		t.Fatalf("merged command starts %v, want EVALSHA of 3 keys a, b, b", args[:6])
	}
	// Each request's ints, then its fixed windows' fields.
	if want := 3 + 3 + len(appendApplyInts(nil, 0, limits(1))) + 1 + len(appendApplyInts(nil, 0, limits(2))) + 2; len(args) != want {
		t.Fatalf("merged call has %d arguments, want %d", len(args), want)
	}
	var got []any
	for _, v := range args[6:] {
		switch v := v.(type) {
		case *int64:
			got = append(got, *v)
		case *string:
			got = append(got, *v)
		}
	}
	var want []any
	for _, v := range appendApplyInts(nil, 0, limits(1)) {
		want = append(want, v)
	}
	want = append(want, "a/0")
	for _, v := range appendApplyInts(nil, 0, limits(2)) {
		want = append(want, v)
	}
	want = append(want, "b/0", "b/1")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged arguments %v, want a's then b's: %v", got, want)
	}
	reply := []int64{7, 1, 1, 4, 0, 0, 0, 7, 0, 1, 2, 0, 0, 0, 0, 0, 9, -1, 0}
	merged.SetVal(reply)
	m.split()
	if got := a.reply; a.err != nil || fmt.Sprint(got) != fmt.Sprint(reply[:7]) {
		t.Errorf("call a got %v, %v; want %v", got, a.err, reply[:7])
	}
	if got := b.reply; b.err != nil || fmt.Sprint(got) != fmt.Sprint(reply[7:]) {
		t.Errorf("call b got %v, %v; want %v", got, b.err, reply[7:])
	}

	for _, tt := range []struct {
		name string
		set  func(*redis.IntSliceCmd)
		want error
	}{
		{"short reply", func(c *redis.IntSliceCmd) { c.SetVal(reply[:15]) }, ErrBadReply},
		{"failed command", func(c *redis.IntSliceCmd) { c.SetErr(redis.ErrClosed) }, redis.ErrClosed},
	} {
		a, b = typedCall("a", 0, limits(1)...).queue(), typedCall("b", 0, limits(2)...).queue()
		tt.set(m.merge(ctx, []*scriptCall{a, b}, algo.DefaultMaxCost)[0].(*redis.IntSliceCmd))
		m.split()
		for _, c := range []*scriptCall{a, b} {
			if !errors.Is(c.err, tt.want) || c.reply != nil {
				t.Errorf("%s: a call got %v, %v; want no reply and %v", tt.name, c.reply, c.err, tt.want)
			}
		}
	}

	// A lone call gets its reply whole, for parseApplyInts to judge.
	lone := typedCall("a", 0, limits(1)...)
	m.merge(ctx, []*scriptCall{lone}, algo.DefaultMaxCost)[0].(*redis.IntSliceCmd).SetVal(reply[:3])
	m.split()
	if fmt.Sprint(lone.reply) != fmt.Sprint(reply[:3]) || lone.err != nil {
		t.Errorf("lone call got %v, %v; want %v", lone.reply, lone.err, reply[:3])
	}
}
