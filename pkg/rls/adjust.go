package rls

import (
	"fmt"
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
	return adjustSteps(adjust, now, domain, r, l, nil)
}

// adjustSteps is adjustLimit, telling step, when it is not nil, what each
// adjuster answered and whether that answer was ignored. The request path
// passes nil and pays nothing for the telling.
func adjustSteps(adjust []LimitAdjuster, now time.Time, domain string, r *rules.Rule, l *rules.Limit, step func(a LimitAdjuster, next algo.Policy, ignored bool)) (algo.Policy, uint32) {
	pol := l.Policy
	if len(adjust) == 0 {
		return pol, l.RequestsPerUnit
	}
	for _, a := range adjust {
		next := a.AdjustLimit(now, domain, r, l, pol)
		ignored := next.Algorithm != pol.Algorithm || next.Period != pol.Period || next.Limit < 0 || next.Burst < 0
		if step != nil {
			step(a, next, ignored)
		}
		if !ignored {
			pol = next
		}
	}
	if pol.Limit == l.Policy.Limit {
		return pol, l.RequestsPerUnit
	}
	return pol, uint32(min(pol.Limit, math.MaxUint32))
}

// Effective is a configured limit as the adjusters make it at one time.
type Effective struct {
	// Policy is the policy the request path would apply.
	Policy algo.Policy
	// RequestsPerUnit is what statuses would report as current_limit.
	RequestsPerUnit uint32
	// Sources lists the adjusters that changed the limit or whose answer
	// was ignored, in order; empty when the limit is as configured.
	Sources []AdjustSource
}

// AdjustSource is one adjuster's part in an Effective limit.
type AdjustSource struct {
	// Name is the adjuster's String when it has one (a warm-up ramp or a
	// runtime override may say which), else its Go type.
	Name string
	// Limit and Burst are what it returned.
	Limit, Burst int64
	// Ignored: it changed the algorithm or period, or returned a negative
	// number, so the request path dropped its answer.
	Ignored bool
}

// EffectiveLimit returns limit l of rule r in domain as the service's
// adjusters (Config.Adjust) make it at now: the same computation the
// request path runs, with the source of every change. It is for tools such
// as the live explain endpoint and allocates.
func (s *Service) EffectiveLimit(now time.Time, domain string, r *rules.Rule, l *rules.Limit) Effective {
	return EffectiveLimit(s.cfg.Adjust, now, domain, r, l)
}

// EffectiveLimit is Service.EffectiveLimit for a given list of adjusters.
func EffectiveLimit(adjust []LimitAdjuster, now time.Time, domain string, r *rules.Rule, l *rules.Limit) Effective {
	var e Effective
	e.Policy, e.RequestsPerUnit = adjustSteps(adjust, now, domain, r, l, func(a LimitAdjuster, next algo.Policy, ignored bool) {
		e.Sources = append(e.Sources, AdjustSource{Name: adjusterName(a), Limit: next.Limit, Burst: next.Burst, Ignored: ignored})
	})
	// An adjuster that returned the policy it was given changed nothing.
	kept := e.Sources[:0]
	prev := l.Policy
	for _, src := range e.Sources {
		if src.Ignored || src.Limit != prev.Limit || src.Burst != prev.Burst {
			kept = append(kept, src)
		}
		if !src.Ignored {
			prev.Limit, prev.Burst = src.Limit, src.Burst
		}
	}
	e.Sources = kept
	return e
}

// adjusterName names an adjuster for people.
func adjusterName(a LimitAdjuster) string {
	if s, ok := a.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", a)
}

// CurrentLimit returns the requests_per_unit that limit l of rule r has
// now (Config.Now) after the service's adjusters: what a status would
// report for it. It is a rules.EffectiveLimit, for /debug/config
// (rules.Snapshot.Dump).
func (s *Service) CurrentLimit(domain string, r *rules.Rule, l *rules.Limit) uint32 {
	_, rpu := adjustLimit(s.cfg.Adjust, s.cfg.Now(), domain, r, l)
	return rpu
}
