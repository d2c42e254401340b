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
var leanLua string

// leanScript runs lean.lua by EVALSHA.
var leanScript = redis.NewScript(leanLua)

// leanChecks reports whether lean.lua can apply checks: every one a
// fixed window that consumes (no refund, no take) with no burst and a
// positive limit and period, which appendApplyInts writes as code 1 or
// 1 + codeHits.
func leanChecks(checks []algo.Check) bool {
	for i := range checks {
		if !leanCheck(&checks[i]) {
			return false
		}
	}
	return len(checks) > 0
}

// leanCheck reports whether lean.lua can apply c (see leanChecks).
func leanCheck(c *algo.Check) bool {
	return c.Policy.Algorithm == algo.FixedWindow && !c.Refund && !c.Take &&
		c.Policy.Burst == 0 && c.Policy.Limit > 0 && c.Policy.Period > 0
}
