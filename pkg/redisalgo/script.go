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
// in the same order.
func appendApplyArgs(args []any, now int64, checks []algo.Check) []any {
	args = slices.Grow(args, 1+argsPerLimit*len(checks))
	args = append(args, now)
	for i := range checks {
		c := &checks[i]
		mode := 0
		if c.Refund {
			mode = 1
		}
		args = append(args, int(c.Policy.Algorithm), c.Policy.Limit, c.Policy.Period, c.Policy.Burst, c.Hits, mode)
	}
	return args
}

// parseApplyReply decodes apply.lua's reply into out, which must have one
// element per limit of the call, and returns the time the script evaluated
// at and whether every limit that is not a refund allowed. An error names
// the element that is wrong and wraps ErrBadReply; out is then partly
// written and must not be used.
func parseApplyReply(reply any, out []algo.Decision) (now int64, allowed bool, err error) {
	vals, ok := reply.([]any)
	if !ok {
		return 0, false, fmt.Errorf("redisalgo: %w: got %T, want an array", ErrBadReply, reply)
	}
	if want := 2 + 3*len(out); len(vals) != want {
		return 0, false, fmt.Errorf("redisalgo: %w: %d elements, want %d (now, allowed_all and 3 per limit for %d limits)", ErrBadReply, len(vals), want, len(out))
	}
	integer := func(i int, what string, min, max int64) (int64, error) {
		v, ok := vals[i].(int64)
		if !ok {
			return 0, fmt.Errorf("redisalgo: %w: element %d (%s) is %T %v, want an integer", ErrBadReply, i, what, vals[i], vals[i])
		}
		if v < min || v > max {
			return 0, fmt.Errorf("redisalgo: %w: element %d (%s) is %d, want %d..%d", ErrBadReply, i, what, v, min, max)
		}
		return v, nil
	}
	const maxInt = int64(^uint64(0) >> 1)
	if now, err = integer(0, "now µs", 1, maxInt); err != nil {
		return 0, false, err
	}
	all, err := integer(1, "allowed_all", 0, 1)
	if err != nil {
		return 0, false, err
	}
	for k := range out {
		i := 2 + 3*k
		a, err := integer(i, fmt.Sprintf("limit %d allowed", k+1), 0, 1)
		if err != nil {
			return 0, false, err
		}
		rem, err := integer(i+1, fmt.Sprintf("limit %d remaining", k+1), 0, maxInt)
		if err != nil {
			return 0, false, err
		}
		reset, err := integer(i+2, fmt.Sprintf("limit %d reset_after µs", k+1), 0, maxInt)
		if err != nil {
			return 0, false, err
		}
		out[k] = algo.Decision{Allowed: a == 1, Remaining: rem, ResetAfter: reset}
	}
	return now, all == 1, nil
}
