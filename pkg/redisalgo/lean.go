package redisalgo

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// leanLua applies the calls whose every limit is a plain fixed window, as
// apply.lua would and with its arguments, reply and storage, at less of
// Redis's CPU (BENCHMARKS.md, issue 19); its header says why and what it
// takes.
//
//go:embed lua/lean.lua
var leanLuaSource string

// leanLua is lean.lua as loaded (withConstants).
var leanLua = withConstants(leanLuaSource)

// leanScript runs lean.lua by EVALSHA.
var leanScript = redis.NewScript(leanLua)

// leanChecks reports whether lean.lua can apply checks: every one
// leanCheck's.
func leanChecks(checks []algo.Check) bool {
	for i := range checks {
		if !leanCheck(&checks[i]) {
			return false
		}
	}
	return len(checks) > 0
}

// leanCodes are the codes lean.lua takes (its framing refuses any other):
// a consuming fixed window with no burst, refund, take or queue mode, of
// one hit or of hits that follow.
var leanCodes = [...]int64{int64(algo.FixedWindow), int64(algo.FixedWindow) + codeHits}

// leanCheck reports whether lean.lua can apply c: its code, as
// appendApplyInts encodes it, is one of leanCodes, and its limit and
// period are positive (lean.lua refuses others too). Deriving it from the
// encoding, not from the check's fields, means no rule of lean.lua's is
// restated here: a check the encoder marks for anything lean.lua lacks
// (MaxDelay's queue mode, say) goes to apply.lua.
//
// A check-only check (0 hits) is not lean: its decision is a probe, one
// hit that is not consumed (algo.probe), which lean.lua does not make.
func leanCheck(c *algo.Check) bool {
	code, _, _ := applyCode(c)
	return leanShaped(code, c)
}

// leanShaped reports whether a check c encoded as code is one lean.lua
// takes: a code of leanCodes, at least one hit, a positive limit and
// period.
func leanShaped(code int64, c *algo.Check) bool {
	return (code == leanCodes[0] || code == leanCodes[1]) && c.Hits >= 1 && c.Policy.Limit > 0 && c.Policy.Period > 0
}
