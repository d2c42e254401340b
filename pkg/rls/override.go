package rls

import (
	"fmt"
	"math/bits"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// OverridePolicy says what a descriptor's own limit override (Envoy's
// RateLimitDescriptor.limit, often taken from request metadata that a
// client can influence) may do. The zero value is OverridesAllow.
type OverridePolicy uint8

const (
	// OverridesAllow applies every valid override in place of the
	// configured limit, as envoyproxy/ratelimit does.
	OverridesAllow OverridePolicy = iota
	// OverridesLowerOnly applies an override only when it admits no more
	// per second than the matched rule's first limit; any other override
	// is ignored, and the descriptor gets its configured limits.
	OverridesLowerOnly
	// OverridesIgnore ignores every override.
	OverridesIgnore
)

var overridePolicyNames = [...]string{OverridesAllow: "allow", OverridesLowerOnly: "lower-only", OverridesIgnore: "ignore"}

// String returns the flag value of o.
func (o OverridePolicy) String() string {
	if int(o) < len(overridePolicyNames) {
		return overridePolicyNames[o]
	}
	return fmt.Sprintf("override-policy(%d)", uint8(o))
}

// ParseOverridePolicy returns the OverridePolicy named s.
func ParseOverridePolicy(s string) (OverridePolicy, error) {
	for o, name := range overridePolicyNames {
		if name == s {
			return OverridePolicy(o), nil
		}
	}
	return 0, fmt.Errorf("rls: unknown override policy %q (want allow|lower-only|ignore)", s)
}

// overrideRules is what plan.build needs to turn overrides into checks.
type overrideRules struct {
	policy      OverridePolicy
	defaultAlgo algo.Algorithm
	logCap      int64
	// defaultCharge is the cost of an override that matches no rule
	// (Config.DefaultCharge); one that matches a rule keeps its cost.
	defaultCharge bool
}

// check turns a descriptor's own limit into a check, or reports ok false
// when the policy ignores it. It keeps the matched rule's algorithm, when
// there is one, so that an override only changes the numbers, and it obeys
// every bound a rule obeys (units, the algorithm's bounds, the sliding-log
// cap).
func (or overrideRules) check(domain string, entries []algo.Entry, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, r *rules.Rule) (c algo.Check, m checkMeta, ok bool, err error) {
	if or.policy == OverridesIgnore {
		return algo.Check{}, checkMeta{}, false, nil
	}
	unit, known := overrideUnit(o.GetUnit())
	if !known {
		return algo.Check{}, checkMeta{}, false, fmt.Errorf("unknown unit %s (want %s)", o.GetUnit(), overrideUnitNames())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	alg, charge := or.defaultAlgo, or.defaultCharge
	ruleID := overrideRuleID
	if r != nil && len(r.Limits) > 0 {
		alg, charge = r.Limits[0].Policy.Algorithm, r.Limits[0].Charge
		ruleID = r.ID
	}
	hi, period := bits.Mul64(uint64(unit.Micros()), uint64(mult))
	if hi != 0 || period > uint64(algo.MaxPeriod) {
		return algo.Check{}, checkMeta{}, false, fmt.Errorf("period of %d %s is longer than %dµs", mult, o.GetUnit(), algo.MaxPeriod)
	}
	pol := algo.Policy{Algorithm: alg, Limit: int64(o.GetRequestsPerUnit()), Period: int64(period)}
	if err := pol.ValidateWithLogCap(or.logCap); err != nil {
		return algo.Check{}, checkMeta{}, false, err
	}
	if or.policy == OverridesLowerOnly && (r == nil || len(r.Limits) == 0 || looser(pol, r.Limits[0].Policy)) {
		return algo.Check{}, checkMeta{}, false, nil
	}
	return algo.Check{Domain: domain, Entries: entries, HashTag: -1, Policy: pol, Charge: charge},
		checkMeta{limit: limitView{unit: responseUnit(unit), multiplier: mult, rpu: o.GetRequestsPerUnit()}, ruleID: ruleID, limitLabel: overrideRuleID},
		true, nil
}

// looser reports whether p admits more per second than q: p.Limit/p.Period
// > q.Limit/q.Period, compared exactly in 128 bits.
func looser(p, q algo.Policy) bool {
	h1, l1 := bits.Mul64(uint64(p.Limit), uint64(q.Period))
	h2, l2 := bits.Mul64(uint64(q.Limit), uint64(p.Period))
	return h1 > h2 || (h1 == h2 && l1 > l2)
}
