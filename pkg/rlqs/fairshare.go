package rlqs

import (
	"math"
	"sort"
)

// Demand is one Envoy instance's recent demand for a bucket, in requests
// per rule period. Unknown (an instance that has not reported a full
// interval yet) counts as wanting as much as it can get.
type Demand struct {
	Instance string
	// PerPeriod is allowed+denied over the last report, scaled to the
	// rule's period.
	PerPeriod float64
	Unknown   bool
}

// Headroom is how much growth an instance that wants less than its fair
// share is granted above its reported demand: it must be able to grow
// before its next report without being denied.
const (
	headroomFactor = 1.2
	headroomFloor  = 1
)

// FairShares splits limit (requests per period) among the instances by
// max-min fairness over their demands: an instance that wants less than an
// equal share of what is left keeps what it wants (plus headroom), the
// rest is split equally among the others; capacity nobody wants is then
// spread equally over everyone. The result is in whole requests per
// period, indexed like demands, and sums to exactly limit (largest
// remainder rounding, ties to the instance name, so the same inputs give
// the same shares on every replica).
//
// FairShares is pure: it reads no clock and touches no state.
func FairShares(limit int64, demands []Demand) []int64 {
	n := len(demands)
	out := make([]int64, n)
	if n == 0 || limit <= 0 {
		return out
	}
	want := make([]float64, n)
	for i, d := range demands {
		switch {
		case d.Unknown || math.IsInf(d.PerPeriod, 1) || math.IsNaN(d.PerPeriod):
			want[i] = math.Inf(1)
		case d.PerPeriod <= 0:
			want[i] = headroomFloor
		default:
			want[i] = d.PerPeriod*headroomFactor + headroomFloor
		}
	}
	// Water-filling: serve the smallest wants first.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return want[order[a]] < want[order[b]] })
	share := make([]float64, n)
	left := float64(limit)
	for k, i := range order {
		equal := left / float64(n-k)
		s := math.Min(want[i], equal)
		share[i] = s
		left -= s
	}
	// Spread what nobody wanted.
	if left > 0 {
		for i := range share {
			share[i] += left / float64(n)
		}
	}
	return apportion(limit, share, demands)
}

// apportion rounds shares (summing to limit) to integers that sum to
// limit: each gets its floor, and the units left go to the largest
// fractional parts, ties broken by instance name.
func apportion(limit int64, share []float64, demands []Demand) []int64 {
	n := len(share)
	out := make([]int64, n)
	var sum int64
	for i, s := range share {
		out[i] = int64(math.Floor(s + 1e-9))
		if out[i] < 0 {
			out[i] = 0
		}
		sum += out[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	frac := func(i int) float64 { return share[i] - float64(out[i]) }
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := frac(order[a]), frac(order[b])
		// Shares computed by different paths differ in the last bits:
		// compare fractions to a tolerance so the tie-break decides.
		if math.Abs(fa-fb) > 1e-9 {
			return fa > fb
		}
		return demands[order[a]].Instance < demands[order[b]].Instance
	})
	for k := 0; sum < limit; k = (k + 1) % n {
		out[order[k]]++
		sum++
	}
	for k := n - 1; sum > limit; k = (k - 1 + n) % n {
		if out[order[k]] > 0 {
			out[order[k]]--
			sum--
		}
	}
	return out
}

// BurstFor is the token-bucket capacity of an instance with share tokens
// per period when the rule's bucket holds burst (its configured burst, the
// limit when unset) for limit per period: the instance's proportional part
// of the rule's burst, at least one token. The capacities over all
// instances sum to at most burst plus one per instance.
func BurstFor(share, limit, burst int64) int64 {
	if share <= 0 || limit <= 0 {
		return 0
	}
	if burst <= 0 {
		burst = limit
	}
	b := int64(math.Ceil(float64(share) * float64(burst) / float64(limit)))
	return max(b, 1)
}
