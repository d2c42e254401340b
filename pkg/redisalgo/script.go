package redisalgo

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// applyLua is the script that applies one request's limits all or nothing;
// its header documents KEYS, ARGV, the reply and the storage per algorithm.
//
//go:embed lua/apply.lua
var applyLua string

// applyScript runs apply.lua by EVALSHA (go-redis falls back to EVAL on
// NOSCRIPT when run through Script.Run).
var applyScript = redis.NewScript(applyLua)

// argsPerLimit is the number of ARGV entries apply.lua takes per limit.
const argsPerLimit = 6

// ErrBadReply is wrapped by every error parseApplyReply returns: Redis
// answered, but not what apply.lua returns (a different script under the
// SHA, or a proxy in the way).
var ErrBadReply = errors.New("malformed apply.lua reply")

// appendApplyArgs appends apply.lua's ARGV for checks to args: now (Unix µs,
// 0 for the server's TIME), then per check its algorithm code, limit,
// period µs, burst, hits and mode (0 consume, 1 refund). The keys go in KEYS
// in the same order. The backend uses appendApplyInts, which boxes nothing.
func appendApplyArgs(args []any, now int64, checks []algo.Check) []any {
	ints := appendApplyInts(nil, now, checks)
	args = slices.Grow(args, len(ints))
	for _, v := range ints {
		args = append(args, v)
	}
	return args
}

// appendApplyInts appends the numbers appendApplyArgs describes to dst.
// Every ARGV entry is an integer, so the backend can pass them to go-redis
// as *int64 without boxing each one.
func appendApplyInts(dst []int64, now int64, checks []algo.Check) []int64 {
	dst = slices.Grow(dst, 1+argsPerLimit*len(checks))
	dst = append(dst, now)
	for i := range checks {
		c := &checks[i]
		var mode int64
		if c.Refund {
			mode = 1
		}
		dst = append(dst, int64(c.Policy.Algorithm), c.Policy.Limit, c.Policy.Period, c.Policy.Burst, c.Hits, mode)
	}
	return dst
}

// parseApplyReply decodes apply.lua's reply, as go-redis returns it for a
// generic command, into out, which must have one element per limit of the
// call, and returns the time the script evaluated at and whether every limit
// that is not a refund allowed. An error names the element that is wrong and
// wraps ErrBadReply; out is then partly written and must not be used.
func parseApplyReply(reply any, out []algo.Decision) (now int64, allowed bool, err error) {
	vals, ok := reply.([]any)
	if !ok {
		return 0, false, fmt.Errorf("redisalgo: %w: got %T, want an array", ErrBadReply, reply)
	}
	if err := checkReplyLen(len(vals), len(out)); err != nil {
		return 0, false, err
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return 0, false, fmt.Errorf("redisalgo: %w: element %d (%s) is %T %v, want an integer", ErrBadReply, i, replyElement(i), v, v)
		}
		ints[i] = n
	}
	return parseApplyInts(ints, out)
}

// parseApplyInts is parseApplyReply for a reply read as integers (the
// backend reads it with an IntSliceCmd, which boxes nothing). Error texts
// are built only on failure: this runs once per script call.
func parseApplyInts(vals []int64, out []algo.Decision) (now int64, allowed bool, err error) {
	if err := checkReplyLen(len(vals), len(out)); err != nil {
		return 0, false, err
	}
	const maxInt = int64(^uint64(0) >> 1)
	in := func(i int, min, max int64) bool { return vals[i] >= min && vals[i] <= max }
	bad := func(i int, min, max int64) error {
		return fmt.Errorf("redisalgo: %w: element %d (%s) is %d, want %d..%d", ErrBadReply, i, replyElement(i), vals[i], min, max)
	}
	if !in(0, 1, maxInt) {
		return 0, false, bad(0, 1, maxInt)
	}
	if !in(1, 0, 1) {
		return 0, false, bad(1, 0, 1)
	}
	for k := range out {
		i := 2 + 3*k
		switch {
		case !in(i, 0, 1):
			return 0, false, bad(i, 0, 1)
		case !in(i+1, 0, maxInt):
			return 0, false, bad(i+1, 0, maxInt)
		case !in(i+2, 0, maxInt):
			return 0, false, bad(i+2, 0, maxInt)
		}
		out[k] = algo.Decision{Allowed: vals[i] == 1, Remaining: vals[i+1], ResetAfter: vals[i+2]}
	}
	return vals[0], vals[1] == 1, nil
}

func checkReplyLen(n, limits int) error {
	if want := 2 + 3*limits; n != want {
		return fmt.Errorf("redisalgo: %w: %d elements, want %d (now, allowed_all and 3 per limit for %d limits)", ErrBadReply, n, want, limits)
	}
	return nil
}

// replyElement names element i of the reply for error messages.
func replyElement(i int) string {
	switch i {
	case 0:
		return "now µs"
	case 1:
		return "allowed_all"
	}
	k, field := (i-2)/3+1, [...]string{"allowed", "remaining", "reset_after µs"}[(i-2)%3]
	return fmt.Sprintf("limit %d %s", k, field)
}
