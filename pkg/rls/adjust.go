package rls

import (
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// LimitAdjuster changes a configured limit for one request: a warm-up ramp,
// a runtime override, an adaptive controller's factor. It runs on the
// request path for every limit of every matched rule, so it must answer
// from memory and never block; whatever it needs from elsewhere it fetches
// in the background.
//
// The counter's identity (algo.AppendIdentity) does not include the limit,
// so an adjusted limit applies to the same counter and state: lowering it
// takes effect at once, raising it lets the counter admit more from the
// state it has.
type LimitAdjuster interface {
	// AdjustLimit returns the policy limit l of rule r should have at now,
	// given p, the policy so far (l.Policy adjusted by the adjusters before
	// this one). It may change Limit and Burst; it must keep Algorithm and
	// Period, which name the counter.
	AdjustLimit(now time.Time, domain string, r *rules.Rule, l *rules.Limit, p algo.Policy) algo.Policy
}

// adjustLimit runs the adjusters in order over l's policy and returns the
// effective policy with the requests_per_unit that statuses report for it.
// An adjuster that changes the algorithm or period is ignored for that
// step, since the counter it names would not be the rule's.
func adjustLimit(adjust []LimitAdjuster, now time.Time, domain string, r *rules.Rule, l *rules.Limit) (algo.Policy, uint32) {
	pol := l.Policy
	if len(adjust) == 0 {
		return pol, l.RequestsPerUnit
	}
	for _, a := range adjust {
		next := a.AdjustLimit(now, domain, r, l, pol)
		if next.Algorithm != pol.Algorithm || next.Period != pol.Period || next.Limit < 0 || next.Burst < 0 {
			continue
		}
		pol = next
	}
	if pol.Limit == l.Policy.Limit {
		return pol, l.RequestsPerUnit
	}
	return pol, uint32(min(pol.Limit, math.MaxUint32))
}

// EffectiveLimit returns the requests_per_unit that limit l of rule r has
// at now after the configured adjusters, as statuses would report it; for
// /debug/config.
func (s *Service) EffectiveLimit(now time.Time, domain string, r *rules.Rule, l *rules.Limit) uint32 {
	_, rpu := adjustLimit(s.cfg.Adjust, now, domain, r, l)
	return rpu
}
