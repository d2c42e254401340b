package redisalgo

import (
	"fmt"
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// appendApplyArgs is appendApplyInts as the generic arguments a script run
// through go-redis's Script takes, for tests that call apply.lua directly,
// with testField as every fixed window's field: such tests give each limit
// a key of its own, a hash of one field.
func appendApplyArgs(args []any, now int64, checks []algo.Check) []any {
	ints := appendApplyInts(nil, now, checks)
	args = slices.Grow(args, len(ints)+len(checks))
	for _, v := range ints {
		args = append(args, v)
	}
	for i := range checks {
		if checks[i].Policy.KeyedWindow() {
			args = append(args, testField)
		}
	}
	return args
}

// counter returns where c's state is at now, without a prefix, with the
// default bucket count (CounterAt).
func counter(c algo.Check, now int64) (key, field string) {
	return CounterAt("", c, now, DefaultCounterHashes)
}

// testField is the field of a fixed window's count in tests that call the
// scripts directly (appendApplyArgs).
const testField = "c"

// parseApplyReply is parseApplyInts for a reply as go-redis returns it for
// a generic command (tests that call apply.lua directly): it decodes a
// one-request call's reply into out, which must have one
// element per limit of the request, and returns the time the script
// evaluated at and whether every limit that is not a refund allowed. An
// error names the element that is wrong and wraps ErrBadReply, or is
// ErrWrongType or ErrScriptFailed; out is then partly written and must not
// be used.
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

// keyOf is the key of c's counter with the default bucket count: for a
// fixed window its window's hash at time 0 (every window's hash has the
// counter's slot).
func keyOf(c algo.Check) []byte {
	key, _ := counter(c, 0)
	return []byte(key)
}
