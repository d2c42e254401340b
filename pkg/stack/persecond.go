package stack

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// PerSecondMetricPrefix names the per-second Redis's metrics: its layers
// export the same collectors as the main Redis's, under this prefix.
const PerSecondMetricPrefix = "persecond_"

// applyFunc is one side's Apply.
type applyFunc func(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error)

// perSecond routes each check by its period: at most algo.Second to the
// per-second Redis (sec), longer to the main one.
//
// Each side is all or nothing on its own, so a request is admitted on both
// only if both admit it. When the sides disagree, or one fails, the side
// that consumed is refunded at the time its hits were decided at (each
// decision's At, carried by giveBack into the refund's Check.At: the
// request's now would be placed anew by the Redis backend when the other
// side answered late, possibly in the next window), as redisalgo refunds
// across Cluster slot groups: a denied request then consumes nothing, and while
// the refund is in flight other requests may be under-admitted, never
// over-admitted. A refund that fails is logged; its limits under-admit by
// at most the refunded hits until their state expires.
type perSecond struct {
	main, sec applyFunc
	log       *zap.Logger
}

// isPerSecond reports whether c belongs on the per-second Redis.
func isPerSecond(c algo.Check) bool { return c.Policy.Period <= algo.Second }

// Apply splits checks by period, applies both parts concurrently and
// joins their decisions in request order.
func (p perSecond) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	// Most requests stay on one side: route them without building index
	// lists, which only a request spanning both needs.
	nsec := 0
	for _, c := range checks {
		if isPerSecond(c) {
			nsec++
		}
	}
	switch nsec {
	case 0:
		return p.main(ctx, now, checks)
	case len(checks):
		return p.sec(ctx, now, checks)
	}
	secIdx, mainIdx := make([]int, 0, nsec), make([]int, 0, len(checks)-nsec)
	for i, c := range checks {
		if isPerSecond(c) {
			secIdx = append(secIdx, i)
		} else {
			mainIdx = append(mainIdx, i)
		}
	}
	secChecks, mainChecks := pick(checks, secIdx), pick(checks, mainIdx)
	queueOnOneSide(secChecks, mainChecks)
	type result struct {
		d   []algo.Decision
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := p.sec(ctx, now, secChecks)
		done <- result{d, err}
	}()
	mainD, mainErr := p.main(ctx, now, mainChecks)
	r := <-done
	secD, secErr := r.d, r.err

	mainOK, secOK := mainErr == nil && allAllowed(mainD), secErr == nil && allAllowed(secD)
	if mainOK && !secOK {
		mainD = p.refund(ctx, now, p.main, mainChecks, mainD)
	}
	if secOK && !mainOK {
		secD = p.refund(ctx, now, p.sec, secChecks, secD)
	}
	if err := errors.Join(mainErr, secErr); err != nil {
		return nil, err
	}
	out := make([]algo.Decision, len(checks))
	for k, i := range mainIdx {
		out[i] = mainD[k]
	}
	for k, i := range secIdx {
		out[i] = secD[k]
	}
	return out, nil
}

// refund gives back what checks consumed on one side and returns their
// decisions with each refunded check's replaced by the check-only
// decision of its restored state.
func (p perSecond) refund(ctx context.Context, now time.Time, apply applyFunc, checks []algo.Check, d []algo.Decision) []algo.Decision {
	var back []algo.Check
	var idx []int
	for i, c := range checks {
		// A charge stays counted whatever the other side decided.
		if c.Refund || c.Charge || c.Hits <= 0 {
			continue
		}
		back = append(back, giveBack(c, d[i]))
		idx = append(idx, i)
	}
	if len(back) == 0 {
		return d
	}
	// The refund must happen even when the request's deadline is what
	// failed the other side; the Redis timeouts still bound it.
	r, err := apply(context.WithoutCancel(ctx), now, back)
	if err != nil {
		p.log.Warn("refund across the per-second and main Redis failed; its limits under-admit until their state expires", zap.Error(err))
		return d
	}
	for k, i := range idx {
		d[i] = r[k]
	}
	return d
}

func pick(checks []algo.Check, idx []int) []algo.Check {
	out := make([]algo.Check, len(idx))
	for k, i := range idx {
		out[k] = checks[i]
	}
	return out
}

func allAllowed(d []algo.Decision) bool {
	for _, x := range d {
		if !x.Allowed {
			return false
		}
	}
	return true
}

// peekFunc is one side's Peek.
type peekFunc func(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Peeked, error)

// peekPerSecond peeks at each check on the Redis that holds it, routed as
// perSecond routes Apply.
func peekPerSecond(main, sec peekFunc) peekFunc {
	return func(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Peeked, error) {
		var secIdx, mainIdx []int
		for i, c := range checks {
			if isPerSecond(c) {
				secIdx = append(secIdx, i)
			} else {
				mainIdx = append(mainIdx, i)
			}
		}
		out := make([]algo.Peeked, len(checks))
		for _, side := range []struct {
			peek peekFunc
			idx  []int
		}{{main, mainIdx}, {sec, secIdx}} {
			if len(side.idx) == 0 {
				continue
			}
			got, err := side.peek(ctx, now, pick(checks, side.idx))
			if err != nil {
				return nil, err
			}
			for j, i := range side.idx {
				out[i] = got[j]
			}
		}
		return out, nil
	}
}
