package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// applyCmd builds an apply.lua EVALSHA of n limits on key the way
// Backend.command does (the argument values do not matter to merge).
func applyCmd(key string, n int) *redis.IntSliceCmd {
	checks := make([]algo.Check, n)
	for i := range checks {
		checks[i] = algo.Check{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: 1}, Hits: 1}
	}
	return applyCmdOf(key, checks...)
}

// applyCmdOf builds an apply.lua EVALSHA of checks, all on key.
func applyCmdOf(key string, checks ...algo.Check) *redis.IntSliceCmd {
	args := []any{argEvalSHA, argSHA, len(checks)}
	for range checks {
		args = append(args, &key)
	}
	for _, v := range appendApplyInts(nil, 0, checks) {
		args = append(args, &v)
	}
	return redis.NewIntSliceCmd(context.Background(), args...)
}

// TestMergeBoundsCost: requests join a merged call only while the call's
// summed cost stays within the bound, so no merged script runs much longer
// than one request may; a request above the bound goes alone.
func TestMergeBoundsCost(t *testing.T) {
	ctx := context.Background()
	log := func(hits int64) algo.Check {
		return algo.Check{Policy: algo.Policy{Algorithm: algo.SlidingLog, Limit: 10_000, Period: algo.Minute}, Hits: hits}
	}
	cmds := []redis.Cmder{
		applyCmdOf("a", log(400)), applyCmdOf("b", log(400)), applyCmdOf("c", log(400)),
		applyCmdOf("d", log(5000)), applyCmdOf("e", log(100), log(100)), applyCmdOf("f", log(1)),
	}
	var m merger
	out := m.merge(ctx, cmds, false, 1000)
	defer m.finish()
	var got []int
	for _, c := range out {
		got = append(got, c.Args()[2].(int))
	}
	// Keys per call: a+b (800), c alone (c+d would be 5400), d alone
	// (5000, above the bound), then e+f (201).
	if want := []int{2, 1, 1, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged calls carry %v keys, want %v", got, want)
	}
	for i, c := range out {
		if cost := callCost(c.(*redis.IntSliceCmd)); cost == math.MaxInt64 || (cost > 1000 && c.Args()[2].(int) > 1) {
			t.Errorf("call %d merges requests costing %d, above 1000", i, cost)
		}
	}
}

func TestIsApplyEvalSHA(t *testing.T) {
	ctx := context.Background()
	key := "k"
	tests := []struct {
		name string
		cmd  *redis.IntSliceCmd
		want bool
	}{
		{"apply", applyCmd("k", 2), true},
		{"eval", redis.NewIntSliceCmd(ctx, argEval, argScript, 1, &key), false},
		{"other_sha", redis.NewIntSliceCmd(ctx, argEvalSHA, "0000", 1, &key), false},
		{"count_not_int", redis.NewIntSliceCmd(ctx, argEvalSHA, argSHA, "1", &key), false},
		{"count_zero", redis.NewIntSliceCmd(ctx, argEvalSHA, argSHA, 0, &key), false},
		{"count_past_args", redis.NewIntSliceCmd(ctx, argEvalSHA, argSHA, 5, &key), false},
		{"key_not_pointer", redis.NewIntSliceCmd(ctx, argEvalSHA, argSHA, 1, "k"), false},
		{"short", redis.NewIntSliceCmd(ctx, argEvalSHA, argSHA), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isApplyEvalSHA(tt.cmd); got != tt.want {
				t.Fatalf("isApplyEvalSHA(%v) = %v, want %v", tt.cmd.Args(), got, tt.want)
			}
		})
	}
}

// TestMergeSplitsReply: merge keeps other commands as they are, merges the
// apply calls into one whose keys and arguments come in part order, and
// finish hands each part its share of the reply, or the error.
func TestMergeSplitsReply(t *testing.T) {
	ctx := context.Background()
	a, b := applyCmd("a", 1), applyCmd("b", 2)
	other := redis.NewIntCmd(ctx, "incr", "x")
	var m merger
	out := m.merge(ctx, []redis.Cmder{a, other, b}, false, algo.DefaultMaxCost)
	if len(out) != 2 || out[0] != other {
		t.Fatalf("merge gave %d commands, first %v; want the INCR, then one merged call", len(out), out[0])
	}
	merged := out[1].(*redis.IntSliceCmd)
	args := merged.Args()
	if args[2] != 3 || *args[3].(*string) != "a" || *args[4].(*string) != "b" || *args[5].(*string) != "b" {
		t.Fatalf("merged keys %v, want 3 keys a, b, b", args[:6])
	}
	if want := 3 + 3 + (2 + argsPerLimit) + (2 + 2*argsPerLimit); len(args) != want {
		t.Fatalf("merged call has %d arguments, want %d", len(args), want)
	}
	reply := []int64{7, 1, 1, 4, 0, 0, 7, 0, 1, 2, 0, 0, 0, 0, 9, -1}
	merged.SetVal(reply)
	m.finish()
	if got := a.Val(); len(got) != 6 || got[3] != 4 {
		t.Errorf("part a got %v, want %v", got, reply[:6])
	}
	if got := b.Val(); len(got) != 10 || got[9] != -1 {
		t.Errorf("part b got %v, want %v", got, reply[6:])
	}

	a, b = applyCmd("a", 1), applyCmd("b", 2)
	merged = m.merge(ctx, []redis.Cmder{a, b}, false, algo.DefaultMaxCost)[0].(*redis.IntSliceCmd)
	merged.SetVal(reply[:15])
	m.finish()
	for _, p := range []*redis.IntSliceCmd{a, b} {
		if err := p.Err(); !errors.Is(err, ErrBadReply) {
			t.Errorf("a short merged reply gave a part %v, want ErrBadReply", err)
		}
	}

	a, b = applyCmd("a", 1), applyCmd("b", 2)
	merged = m.merge(ctx, []redis.Cmder{a, b}, false, algo.DefaultMaxCost)[0].(*redis.IntSliceCmd)
	merged.SetErr(redis.ErrClosed)
	m.finish()
	for _, p := range []*redis.IntSliceCmd{a, b} {
		if err := p.Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("a failed merged call gave a part %v, want its error", err)
		}
	}
}
