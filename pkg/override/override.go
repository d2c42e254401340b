// Package override holds runtime limit overrides: an operator's "halve this
// limit for 15 minutes" during an incident, and the factor the adaptive
// controller (pkg/adaptive) sets. An override targets one limit of one
// domain, scales it by a factor or replaces its requests_per_unit, and
// expires by itself. Overrides live in a Store (Redis, shared by every
// replica, or in-process for the embedded store); a Table keeps a copy in
// memory, refreshed in the background, and applies it on the request path
// as a pkg/rls LimitAdjuster, answering from memory without blocking. The
// package also serves the admin HTTP API for overrides and is that API's
// client, for the envoy-rls override command.
//
// It must not touch rate-limit counters: it never reads or writes a
// counter key, and its Redis keys share no prefix with pkg/redisalgo's.
package override

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Source says who set an override.
type Source string

// The sources of an override. A manual override wins over an adaptive one
// on the same limit, and suspends the controller for that limit while it
// lasts: that is how an operator pins a limit the controller moves.
const (
	Manual   Source = "manual"
	Adaptive Source = "adaptive"
)

// DefaultMaxTTL bounds an override's lifetime: an override forgotten after
// an incident must not outlive a week.
const DefaultMaxTTL = 7 * 24 * time.Hour

// maxFactor bounds a factor: a typo such as 50 for 0.50 must not lift a
// limit a thousandfold.
const maxFactor = 100

// Override changes one limit of one domain until it expires. Exactly one of
// Factor and RequestsPerUnit is set.
type Override struct {
	// Domain and Limit name the limit: Limit is what Target returns for it
	// (its name, else its rule's ID, with "/<label>" for one of several
	// unnamed limits of a rule).
	Domain string `json:"domain"`
	Limit  string `json:"limit"`
	Source Source `json:"source"`
	// Factor multiplies the limit (and burst): 0.5 halves it.
	Factor float64 `json:"factor,omitempty"`
	// RequestsPerUnit replaces the limit; 0 blocks every request, as a
	// configured limit of 0 does.
	RequestsPerUnit *uint32 `json:"requests_per_unit,omitempty"`
	// Reason and By say why and who, for the log and override list.
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
	// SetAt and Expires are when it was set and when it stops applying.
	SetAt   time.Time `json:"set_at"`
	Expires time.Time `json:"expires"`
}

// ID is an override's identity in a store: one per limit and source.
type ID struct {
	Domain string
	Limit  string
	Source Source
}

func (o *Override) ID() ID { return ID{o.Domain, o.Limit, o.Source} }

// live reports whether o applies at now.
func (o *Override) live(now time.Time) bool { return now.Before(o.Expires) }

// check reports what is wrong with o, naming the field.
func (o *Override) check() error {
	var errs []error
	if o.Domain == "" {
		errs = append(errs, errors.New("domain: empty (want the rule's domain)"))
	}
	if o.Limit == "" {
		errs = append(errs, errors.New("limit: empty (want the limit's name or rule ID, as /debug/config lists them)"))
	}
	if o.Source != Manual && o.Source != Adaptive {
		errs = append(errs, fmt.Errorf("source: %q (want %s|%s)", o.Source, Manual, Adaptive))
	}
	if (o.Factor == 0) == (o.RequestsPerUnit == nil) {
		errs = append(errs, errors.New("want exactly one of factor and requests_per_unit"))
	}
	if math.IsNaN(o.Factor) || o.Factor < 0 || o.Factor > maxFactor {
		errs = append(errs, fmt.Errorf("factor: %v (want above 0 and at most %d; requests_per_unit: 0 blocks)", o.Factor, maxFactor))
	}
	if o.Reason == "" {
		errs = append(errs, errors.New("reason: empty (every change is logged with its reason)"))
	}
	return errors.Join(errs...)
}

// Apply returns p with o applied. A factor scales the limit and burst,
// rounding down but keeping at least 1 where there was a limit, so that a
// factor slows a limit and never blocks it by rounding; an absolute
// requests_per_unit scales the burst by the same ratio, so a bucket keeps
// its shape.
func (o *Override) Apply(p algo.Policy) algo.Policy {
	scale := func(v int64, f float64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, int64(math.Min(float64(v)*f, math.MaxInt64/2)))
	}
	if o.Factor > 0 {
		p.Limit, p.Burst = scale(p.Limit, o.Factor), scale(p.Burst, o.Factor)
		return p
	}
	if o.RequestsPerUnit == nil {
		return p
	}
	rpu := *o.RequestsPerUnit
	if p.Burst > 0 && p.Limit > 0 {
		p.Burst = scale(p.Burst, float64(rpu)/float64(p.Limit))
	}
	p.Limit = int64(rpu)
	if p.Limit == 0 {
		p.Burst = 0
	}
	return p
}

// Target returns the name by which an override addresses limit l of rule
// r: the limit's name when it has one; else the rule's ID (its name or
// path, as /debug/config lists it); and, for one of several unnamed limits
// of one rule, the rule's ID and the limit's label ("api.user/rate_limits[1]").
// A name shared by limits of several rules addresses all of them.
func Target(r *rules.Rule, l *rules.Limit) string {
	if l.Name != "" {
		return l.Name
	}
	if len(r.Limits) <= 1 {
		return r.ID
	}
	return r.ID + "/" + l.Label
}
