package redisalgo

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// applyCmd builds an apply.lua EVALSHA of n limits on key the way
// Backend.command does (the argument values do not matter to merge).
func applyCmd(key string, n int) *redis.IntSliceCmd {
	args := []any{argEvalSHA, argSHA, n}
	for range n {
		args = append(args, &key)
	}
	now, count := int64(0), int64(n)
	args = append(args, &now, &count)
	for range n * argsPerLimit {
		v := int64(1)
		args = append(args, &v)
	}
	return redis.NewIntSliceCmd(context.Background(), args...)
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
	out := m.merge(ctx, []redis.Cmder{a, other, b}, false)
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
	reply := []int64{7, 1, 1, 4, 0, 7, 0, 1, 2, 0, 0, 0, 9}
	merged.SetVal(reply)
	m.finish()
	if got := a.Val(); len(got) != 5 || got[3] != 4 {
		t.Errorf("part a got %v, want %v", got, reply[:5])
	}
	if got := b.Val(); len(got) != 8 || got[7] != 9 {
		t.Errorf("part b got %v, want %v", got, reply[5:])
	}

	a, b = applyCmd("a", 1), applyCmd("b", 2)
	merged = m.merge(ctx, []redis.Cmder{a, b}, false)[0].(*redis.IntSliceCmd)
	merged.SetVal(reply[:12])
	m.finish()
	for _, p := range []*redis.IntSliceCmd{a, b} {
		if err := p.Err(); !errors.Is(err, ErrBadReply) {
			t.Errorf("a short merged reply gave a part %v, want ErrBadReply", err)
		}
	}

	a, b = applyCmd("a", 1), applyCmd("b", 2)
	merged = m.merge(ctx, []redis.Cmder{a, b}, false)[0].(*redis.IntSliceCmd)
	merged.SetErr(redis.ErrClosed)
	m.finish()
	for _, p := range []*redis.IntSliceCmd{a, b} {
		if err := p.Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("a failed merged call gave a part %v, want its error", err)
		}
	}
}
