// Package randsteps draws random request streams for the algorithm tests
// (pkg/algo's property tests, pkg/redisalgo's differential test): time
// steps scaled to a limit's rate, and hit counts around its capacity. It
// knows nothing of pkg/algo, whose own tests import it. It must not be
// imported by non-test code.
package randsteps

import "math/rand/v2"

// Gap returns a time step (µs) for a limit of limit per period µs: often
// none or about one emission interval, sometimes a quarter period, a few
// times whole periods.
func Gap(r *rand.Rand, period, limit int64) int64 {
	interval := max(period/max(limit, 1), 1)
	switch n := r.IntN(100); {
	case n < 20:
		return 0
	case n < 25:
		return 1
	case n < 65:
		return r.Int64N(2 * interval)
	case n < 85:
		return r.Int64N(period/4 + 1)
	case n < 97:
		return r.Int64N(2 * period)
	default:
		return r.Int64N(10 * period)
	}
}

// Hits returns a request's hits against a limit of capacity: mostly 1,
// sometimes 0 (check only), a few, any share of the capacity, exactly it,
// one more, or a refund (small, or up to the capacity and beyond).
func Hits(r *rand.Rand, capacity int64) (hits int64, refund bool) {
	switch n := r.IntN(100); {
	case n < 55:
		return 1, false
	case n < 65:
		return 0, false
	case n < 75:
		return 2 + r.Int64N(4), false
	case n < 80:
		return r.Int64N(capacity + 1), false
	case n < 83:
		return capacity, false
	case n < 86:
		return capacity + 1, false
	case n < 88:
		return 1 + r.Int64N(capacity+1), true
	default:
		return 1 + r.Int64N(3), true
	}
}
