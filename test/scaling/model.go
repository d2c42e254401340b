package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// slotCount is the number of Redis Cluster hash slots.
const slotCount = redisalgo.SlotCount

// keySlot is Redis Cluster's hash slot of key (pkg/redisalgo's; the tests
// pin it to slots Redis itself reports).
func keySlot(key []byte) int { return redisalgo.KeySlot(key) }

// appendRankKey appends the Redis key envoy-rls writes (pkg/redisalgo
// AppendKey) for a token_bucket limit per second on the descriptor
// BENCHMARKS.md measures, (key, user-<rank>) in domain perf:
// r3{perf:key:user-<rank>:t1}.
func appendRankKey(dst []byte, rank int) []byte {
	entries := [1]algo.Entry{{Key: "key", Value: "user-" + strconv.Itoa(rank)}}
	return redisalgo.AppendKey(dst, algo.Check{Domain: "perf", Entries: entries[:], HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.TokenBucket, Period: algo.Second}}, redisalgo.DefaultCounterHashes)
}

// slotShards returns the shard owning each slot when shards masters split
// the slots as `redis-cli --cluster create` assigns them: near-equal
// contiguous ranges, master i ending at round((i+1)·16384/shards − 1).
func slotShards(shards int) []int {
	owner := make([]int, slotCount)
	per := float64(slotCount) / float64(shards)
	first := 0
	for i := range shards {
		last := int(math.Round(float64(i+1)*per - 1))
		if i == shards-1 || last > slotCount-1 {
			last = slotCount - 1
		}
		for slot := first; slot <= last; slot++ {
			owner[slot] = i
		}
		first = last + 1
	}
	return owner
}

// zipf holds the normalisation of a Zipf distribution over ranks 1..n with
// exponent s: P(rank k) = k^-s / H(n, s).
type zipf struct {
	n int
	s float64
	h float64 // generalised harmonic number H(n, s)
}

func newZipf(n int, s float64) (zipf, error) {
	if n < 1 {
		return zipf{}, fmt.Errorf("scaling: zipf keys %d (want ≥ 1)", n)
	}
	if !(s > 1) || math.IsInf(s, 0) {
		// rand.Zipf needs s > 1; s ≤ 1 is also not what the issue asks.
		return zipf{}, fmt.Errorf("scaling: zipf exponent %v (want > 1)", s)
	}
	var h float64
	// Summed from the smallest term up, so the tail is not lost to rounding.
	for k := n; k >= 1; k-- {
		h += math.Pow(float64(k), -s)
	}
	return zipf{n: n, s: s, h: h}, nil
}

// p returns the probability of rank k (1-based).
func (z zipf) p(k int) float64 { return math.Pow(float64(k), -z.s) / z.h }

// sampler returns a deterministic sampler of ranks 1..n with these
// probabilities, seeded by seed.
func (z zipf) sampler(seed uint64) func() int {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// rand.Zipf draws k in [0, imax] with P(k) ∝ (v+k)^-s; v = 1 makes
	// that (rank)^-s for rank = k+1.
	zr := rand.NewZipf(r, z.s, 1, uint64(z.n-1))
	return func() int { return int(zr.Uint64()) + 1 }
}

// costs are the per-decision Redis figures the model is fed (BENCHMARKS.md).
type costs struct {
	usPerDecision float64 // Redis CPU per decision as measured, merged calls included
	callsMeasured float64 // EVALSHA per decision in that measurement
	usPerCall     float64 // Redis CPU of one more EVALSHA, beyond the measured ones
	merge         float64 // decisions per EVALSHA at the modelled scale
}

// cpu returns the Redis CPU (µs per second) of decisions/s script work
// units sent in calls/s EVALSHA calls.
func (c costs) cpu(decisions, calls float64) float64 {
	return decisions*c.usPerDecision + math.Max(0, calls-decisions*c.callsMeasured)*c.usPerCall
}

// leaseParams are the lease layer's settings (pkg/lease.Options).
type leaseParams struct {
	ttl         float64 // seconds
	hotRPS      float64
	maxFraction float64
}

// keyLoad is what one counter costs Redis per second, summed over the
// replicas, and what the lease layer holds of it.
type keyLoad struct {
	redisDecisions float64 // script work units: decisions, grants, returns
	calls          float64 // EVALSHA calls
	local          float64 // decisions answered from a lease, no Redis
	grants         float64
	returns        float64
	unused         float64 // hits/s handed back by returns
	outstanding    float64 // leased hits held at a time, all replicas
	admitted       float64 // the algorithm's answer: min(demand, limit)
	leased         bool
}

// noLease models a counter with demand lam hits/s, limit lim hits/s
// (token_bucket, burst = lim) spread evenly over replicas, without leases.
// Admitted decisions each go to Redis. Denied ones mostly do not: a
// replica's deny cache answers them until the next token, so each replica
// asks Redis at most about once per token (lim times a second) while the
// counter stays over.
func noLease(lam, lim float64, replicas int, c costs) keyLoad {
	r := lam / float64(replicas)
	d := lam
	if lam > lim {
		d = math.Min(lam, lim+float64(replicas)*math.Min(r, lim))
	}
	return keyLoad{redisDecisions: d, calls: d / c.merge, admitted: math.Min(lam, lim)}
}

// withLease models the same counter with `lease: auto`. Each replica sees
// r = lam/replicas hits/s; at r ≥ hotRPS it leases k = min(r×ttl,
// maxFraction × shared remaining). In steady state the shared remaining is
// the burst less the leases outstanding, Rem = B − R×k, which solves to
// Rem = B − λ·ttl when r×ttl fits under the fraction cap and B/(1+R·f)
// otherwise. Over its limit the bucket is empty, k < 2, and the counter
// goes to Redis as without leases (exact). A lease ends when k hits are
// spent or at ttl, whichever is first; arrivals are Poisson.
func withLease(lam, lim float64, replicas int, c costs, lp leaseParams) keyLoad {
	base := noLease(lam, lim, replicas, c)
	r := lam / float64(replicas)
	if r < lp.hotRPS || lam >= lim || lp.ttl <= 0 {
		return base
	}
	R := float64(replicas)
	burst := lim
	rem := burst - lam*lp.ttl
	if r*lp.ttl > lp.maxFraction*rem {
		rem = burst / (1 + R*lp.maxFraction)
	}
	k := math.Floor(math.Min(r*lp.ttl, lp.maxFraction*rem))
	if k < 2 {
		return base
	}
	life, pShort, unused := leaseLife(r, k, lp.ttl)
	// One lease cycle: the grant carries the request's own hit, then up to
	// k local decisions during life.
	perReplicaGrants := 1 / (life + 1/r)
	g := perReplicaGrants * R
	ret := g * pShort
	d := g + ret
	return keyLoad{
		redisDecisions: d,
		calls:          d, // a grant or a return is its own call
		local:          math.Max(0, lam-g),
		grants:         g,
		returns:        ret,
		unused:         g * unused,
		outstanding:    R * k,
		admitted:       math.Min(lam, lim),
		leased:         true,
	}
}

// leaseLife returns, for a lease of k hits at Poisson rate r hits/s with
// time-to-live ttl: its expected life E[min(ttl, S_k)] (S_k the time of the
// k-th arrival), the probability that it ends at ttl with hits left
// (fewer than k arrivals in ttl), and the expected hits left then
// E[(k − N)^+].
func leaseLife(r, k, ttl float64) (life, pShort, unused float64) {
	const steps = 200
	dt := ttl / steps
	// E[min(ttl, S_k)] = ∫0^ttl P(N_t < k) dt, midpoint rule.
	for i := range steps {
		t := (float64(i) + 0.5) * dt
		life += poissonCDF(int(k)-1, r*t) * dt
	}
	mu := r * ttl
	for n := 0; n < int(k); n++ {
		pn := poissonPMF(n, mu)
		pShort += pn
		unused += (k - float64(n)) * pn
	}
	return life, pShort, unused
}

func poissonPMF(n int, mu float64) float64 {
	if mu == 0 {
		if n == 0 {
			return 1
		}
		return 0
	}
	lg, _ := math.Lgamma(float64(n) + 1)
	return math.Exp(float64(n)*math.Log(mu) - mu - lg)
}

// poissonCDF returns P(N ≤ n) for N ~ Poisson(mu).
func poissonCDF(n int, mu float64) float64 {
	var s float64
	for i := 0; i <= n; i++ {
		s += poissonPMF(i, mu)
	}
	return math.Min(1, s)
}
