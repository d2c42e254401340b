package redisalgo

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// applyLua is the script that applies one or more requests' limits, each
// request all or nothing; its header documents KEYS, ARGV, the reply and
// the storage per algorithm.
//
//go:embed lua/apply.lua
var applyLuaSource string

// applyLua is apply.lua as loaded: its constants written in (withConstants).
var applyLua = withConstants(applyLuaSource)

// constMaxWindowMargin is the placeholder of maxWindowMargin in the
// scripts, a Lua global that does not exist: a script loaded without its
// constants written in fails loudly instead of using another value.
const constMaxWindowMargin = "__MAX_WINDOW_MARGIN__"

// constMaxLimit is the placeholder of algo.MaxLimit in apply.lua: how far
// past its limit a charge may overdraw a window or a log.
const constMaxLimit = "__MAX_LIMIT__"

// sharedLuaSource holds the Lua helpers apply.lua and lean.lua both need
// (divmod, ceilDiv, windowMargin, ttlMs), written into each where its
// sharedMarker line stands: a script cannot call another's functions.
//
//go:embed lua/shared.lua
var sharedLuaSource string

// sharedMarker is the line of a script that lua/shared.lua replaces.
const sharedMarker = "-- __SHARED__"

// withConstants writes lua/shared.lua and the Go constants the scripts
// share into src, so that each has one definition: the helpers in
// shared.lua, the constants here.
func withConstants(src string) string {
	if !strings.Contains(src, sharedMarker) || !strings.Contains(src+sharedLuaSource, constMaxWindowMargin) {
		// The embedded scripts are part of the build: this is a defect of
		// the build, which any test shows at once.
		panic("redisalgo: a script lacks " + sharedMarker + " or " + constMaxWindowMargin)
	}
	src = strings.Replace(src, sharedMarker, sharedLuaSource+"-- end of lua/shared.lua;", 1)
	return strings.NewReplacer(
		constMaxWindowMargin, strconv.FormatInt(maxWindowMargin, 10),
		constMaxLimit, strconv.FormatInt(algo.MaxLimit, 10),
	).Replace(src)
}

// LoadedScripts returns apply.lua and lean.lua as the backend loads them,
// shared helpers and constants written in: for measuring what a script
// call costs Redis (test/bench's --script-cost) without a copy of
// withConstants that could drift.
func LoadedScripts() (apply, lean string) { return applyLua, leanLua }

// applyScript runs apply.lua by EVALSHA (go-redis falls back to EVAL on
// NOSCRIPT when run through Script.Run).
var applyScript = redis.NewScript(applyLua)

// maxArgsPerLimit is the most ARGV entries apply.lua takes per limit:
// code, limit, period, burst, hits and the queue-mode argument.
const maxArgsPerLimit = 6

// Bits of a limit's code in apply.lua's ARGV above its algorithm.
const (
	codeRefund = 8
	codeTake   = 16
	codeBurst  = 32 // burst follows period
	codeHits   = 64 // hits follows (else 1)
	// codeCancel is the mode of a refund that cancels a reservation
	// (algo.Check.ReservedAt).
	codeCancel = 24
	// codeExtra: the queue-mode argument follows hits: MaxDelay, or a
	// cancel's ReservedAt.
	codeExtra = 128
	// codeCharge makes a consume a charge (algo.Check.Charge).
	codeCharge = 256
)

// ErrBadReply is wrapped by every error parseApplyInts returns for a reply
// that is not what apply.lua returns (a different script under the SHA, or
// a proxy in the way).
var ErrBadReply = errors.New("malformed apply.lua reply")

// ErrWrongType is returned for a request when one of its keys holds a value
// that is not a rate-limit state (Redis's WRONGTYPE): something other than
// envoy-rls wrote under its key prefix.
var ErrWrongType error = replyError("a key of this request holds a value of another type (WRONGTYPE); something else writes under envoy-rls's key prefix")

// ErrScriptFailed is returned for a request that apply.lua could not apply
// for a reason other than WRONGTYPE (Redis's log or its error stats say
// which); only that request of a merged script call fails.
var ErrScriptFailed error = replyError("apply.lua failed on this request (not WRONGTYPE; see Redis's errorstats)")

// replyError is an error Redis reported for one request inside a merged
// script call. Like go-redis's own error replies it has a RedisError
// method, so callers classify both alike.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks e as an error reply (go-redis's redis.Error).
func (replyError) RedisError() {}

// Request statuses in apply.lua's reply besides allowed_all's 0 and 1.
const (
	statusWrongType = 2
	statusFailed    = 3
)

// appendApplyInts appends apply.lua's ARGV for one request of checks to
// dst: the number of checks, or its negation then now when now is not 0
// (Unix µs; 0 is the server's TIME), then per check its code (algorithm,
// mode, and which of burst and hits follow), limit and period µs, then its
// burst unless 0 and its hits unless 1. The keys go in KEYS in the same
// order. Several requests' arguments (and keys) concatenated make one
// script call that applies them in order. Every ARGV entry is an integer,
// so the backend can pass them to go-redis as *int64 without boxing each
// one. The defaults left out are what most requests carry: every argument
// costs Redis a string and Lua a table slot and a conversion.
func appendApplyInts(dst []int64, now int64, checks []algo.Check) []int64 {
	dst = slices.Grow(dst, 2+maxArgsPerLimit*len(checks))
	if now == 0 {
		dst = append(dst, int64(len(checks)))
	} else {
		dst = append(dst, -int64(len(checks)), now)
	}
	for i := range checks {
		c := &checks[i]
		code, burst, extra := applyCode(c)
		dst = append(dst, code, c.Policy.Limit, c.Policy.Period)
		if burst != 0 {
			dst = append(dst, burst)
		}
		if c.Hits != 1 {
			dst = append(dst, c.Hits)
		}
		if extra != 0 {
			dst = append(dst, extra)
		}
	}
	return dst
}

// applyCode returns c's code in apply.lua's ARGV (algorithm, mode, and
// which optional arguments follow), and its burst and queue-mode
// arguments (0: left out).
func applyCode(c *algo.Check) (code, burst, extra int64) {
	code = int64(c.Policy.Algorithm)
	if code < 0 || code >= codeRefund {
		// No algorithm apply.lua knows: it blocks, as for any unknown
		// code.
		code = 0
	}
	switch {
	case c.Refund && c.ReservedAt != 0:
		code += codeCancel
	case c.Refund:
		code += codeRefund
	case c.Take:
		code += codeTake
	case c.Charge:
		code += codeCharge
	}
	burst = burstArg(c.Policy)
	if burst != 0 {
		code += codeBurst
	}
	if c.Hits != 1 {
		code += codeHits
	}
	extra = queueArg(c)
	if extra != 0 {
		code += codeExtra
	}
	return code, burst, extra
}

// queueArg is a check's queue-mode argument for apply.lua: a cancel's
// ReservedAt, a queued consume's MaxDelay, else 0 (none).
func queueArg(c *algo.Check) int64 {
	switch {
	case c.Refund:
		return c.ReservedAt
	case c.Take:
		return 0
	}
	return max(c.MaxDelay, 0)
}

// burstArg is the burst argument apply.lua takes for p: for a
// sliding_window, which has no burst, its sub-window count when above 1
// (else 0: the two-window estimate).
func burstArg(p algo.Policy) int64 {
	if p.Algorithm == algo.SlidingWindow {
		if n := p.Windows(); n > 1 {
			return n
		}
		return 0
	}
	return p.Burst
}

// parseApplyInts decodes one request's part of apply.lua's reply, read
// as integers (the backend reads it with an IntSliceCmd, which boxes
// nothing). Error texts are built only on failure: this runs once per
// request.
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
	switch vals[1] {
	case statusWrongType:
		return 0, false, fmt.Errorf("redisalgo: %w", ErrWrongType)
	case statusFailed:
		return 0, false, fmt.Errorf("redisalgo: %w", ErrScriptFailed)
	}
	if !in(1, 0, 1) {
		return 0, false, bad(1, 0, 3)
	}
	for k := range out {
		i := 2 + replyPerLimit*k
		switch {
		case !in(i, 0, 1):
			return 0, false, bad(i, 0, 1)
		case !in(i+1, -maxInt, maxInt):
			// Negative: overdrawn (charges).
			return 0, false, bad(i+1, -maxInt, maxInt)
		case !in(i+2, 0, maxInt):
			return 0, false, bad(i+2, 0, maxInt)
		case !in(i+3, algo.Never, maxInt):
			return 0, false, bad(i+3, algo.Never, maxInt)
		case !in(i+4, 0, maxInt):
			return 0, false, bad(i+4, 0, maxInt)
		}
		out[k] = algo.Decision{Allowed: vals[i] == 1, Remaining: vals[i+1], ResetAfter: vals[i+2], RetryAfter: vals[i+3], Granted: vals[i+4]}
		if d := &out[k]; d.Allowed && d.RetryAfter > 0 {
			// An allowed limit's retry_after is its queue-mode delay.
			d.Delay, d.ReservedAt, d.RetryAfter = d.RetryAfter, vals[0]+d.RetryAfter, 0
		}
	}
	return vals[0], vals[1] == 1, nil
}

func checkReplyLen(n, limits int) error {
	if want := replySize(limits); n != want {
		return fmt.Errorf("redisalgo: %w: %d elements, want %d (now, allowed_all and %d per limit for %d limits)", ErrBadReply, n, want, replyPerLimit, limits)
	}
	return nil
}

// replyPerLimit is the number of reply elements apply.lua returns per
// limit: allowed, remaining, reset_after, retry_after and granted.
const replyPerLimit = 5

// replySize is the length of one request's part of apply.lua's reply.
func replySize(limits int) int { return 2 + replyPerLimit*limits }

// replyElement names element i of a request's reply for error messages.
func replyElement(i int) string {
	switch i {
	case 0:
		return "now µs"
	case 1:
		return "status"
	}
	k, field := (i-2)/replyPerLimit+1, [...]string{"allowed", "remaining", "reset_after µs", "retry_after µs", "granted"}[(i-2)%replyPerLimit]
	return fmt.Sprintf("limit %d %s", k, field)
}
