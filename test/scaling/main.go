// Command scaling is the capacity model of docs/scaling.md: for a mesh of
// envoy-rls replicas in front of a Redis Cluster, with keys drawn from a
// Zipf distribution, it computes per shard the Redis script calls,
// commands and CPU, the hottest shard, and the lease layer's effect and
// its admitted-versus-bound error, with and without leases.
//
//	go run ./test/scaling -replicas 200 -shards 12 -rate 2e6 -keys 1e7 -zipf 1.1
//
// It is a model, not a load test: it starts no process and opens no
// socket. Its inputs are per-decision costs measured by make bench
// (BENCHMARKS.md) and the lease layer's rules (pkg/lease). From pkg/ it
// imports only the key encoding and hash slot (pkg/algo, pkg/redisalgo),
// so that its keys land where envoy-rls's do; it must not import the
// backend layers or the service, so that it models the design rather
// than exercising it. It is deterministic for a seed, and streams over the key ranks
// (memory O(shards), time O(keys), bounded by -keys ≤ 2e8).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

type config struct {
	replicas int
	shards   int
	rate     float64
	keys     int
	zipf     float64
	limit    float64 // per-key limit hits/s; 0: limitRatio × demand
	ratio    float64
	lease    leaseParams
	costs    costs
	samples  int
	seed     uint64
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func parse(args []string, errOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("scaling", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c config
	var keys float64
	fs.IntVar(&c.replicas, "replicas", 200, "envoy-rls replicas; requests are spread evenly over them")
	fs.IntVar(&c.shards, "shards", 12, "Redis Cluster masters, each owning an equal contiguous slot range")
	fs.Float64Var(&c.rate, "rate", 2e6, "decisions per second over the whole mesh")
	fs.Float64Var(&keys, "keys", 1e7, "distinct counters (Zipf ranks)")
	fs.Float64Var(&c.zipf, "zipf", 1.1, "Zipf exponent s (> 1): P(rank k) ∝ k^-s")
	fs.Float64Var(&c.limit, "limit", 0, "every counter's limit in hits/s (token_bucket, burst = limit); 0: -limit-ratio × its demand")
	fs.Float64Var(&c.ratio, "limit-ratio", 2, "with -limit 0, each counter's limit as a multiple of its demand")
	ttl := fs.Duration("lease-ttl", 200*time.Millisecond, "envoy-rls --lease-ttl; 0 turns leasing off")
	fs.Float64Var(&c.lease.hotRPS, "lease-hot-rps", 100, "envoy-rls --lease-hot-rps")
	fs.Float64Var(&c.lease.maxFraction, "lease-max-fraction", 0.1, "envoy-rls --lease-max-fraction")
	fs.Float64Var(&c.costs.usPerDecision, "us-per-decision", 19.5, "Redis CPU µs per decision as measured (BENCHMARKS.md, 2026-11-29 21:50, Redis token_bucket)")
	fs.Float64Var(&c.costs.callsMeasured, "calls-measured", 0.111, "EVALSHA per decision in that measurement")
	fs.Float64Var(&c.costs.usPerCall, "us-per-call", 8.3, "Redis CPU µs of each EVALSHA beyond the measured ones (BENCHMARKS.md: ~11 µs call overhead unmerged − 2.7 µs merged)")
	fs.Float64Var(&c.costs.merge, "merge", 1, "decisions per EVALSHA at this scale (merging is per slot and round trip)")
	fs.IntVar(&c.samples, "samples", 1_000_000, "Zipf draws for the sampled cross-check of shard shares; 0 skips it")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the sampled cross-check")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("scaling: %w", err)
	}
	c.lease.ttl = ttl.Seconds()
	c.keys = int(keys)
	var errs []string
	if c.replicas < 1 {
		errs = append(errs, fmt.Sprintf("-replicas %d (want ≥ 1)", c.replicas))
	}
	if c.shards < 1 || c.shards > slotCount {
		errs = append(errs, fmt.Sprintf("-shards %d (want 1..%d)", c.shards, slotCount))
	}
	if !(c.rate > 0) {
		errs = append(errs, fmt.Sprintf("-rate %v (want > 0)", c.rate))
	}
	if !(keys >= 1 && keys <= 2e8) {
		errs = append(errs, fmt.Sprintf("-keys %v (want 1..2e8: the model streams every rank)", keys))
	}
	if c.limit < 0 || (c.limit == 0 && !(c.ratio > 0)) {
		errs = append(errs, fmt.Sprintf("-limit %v, -limit-ratio %v (want a limit > 0 or a ratio > 0)", c.limit, c.ratio))
	}
	if c.lease.ttl < 0 || c.lease.hotRPS < 0 || !(c.lease.maxFraction > 0 && c.lease.maxFraction <= 1) {
		errs = append(errs, fmt.Sprintf("-lease-ttl %vs, -lease-hot-rps %v, -lease-max-fraction %v (want ttl ≥ 0, hot ≥ 0, 0 < fraction ≤ 1)",
			c.lease.ttl, c.lease.hotRPS, c.lease.maxFraction))
	}
	if c.costs.usPerDecision < 0 || c.costs.usPerCall < 0 || c.costs.callsMeasured < 0 || !(c.costs.merge >= 1) {
		errs = append(errs, "-us-per-decision, -us-per-call, -calls-measured (want ≥ 0), -merge (want ≥ 1)")
	}
	if c.samples < 0 || c.samples > 1e8 {
		errs = append(errs, fmt.Sprintf("-samples %d (want 0..1e8)", c.samples))
	}
	if len(errs) > 0 {
		return config{}, fmt.Errorf("scaling: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// shardLoad sums keyLoads per shard.
type shardLoad struct {
	slots       int
	keys        int
	demand      float64
	off, on     keyLoad
	hottestKey  int
	hottestRate float64
}

func (s *shardLoad) add(dst *keyLoad, k keyLoad) {
	dst.redisDecisions += k.redisDecisions
	dst.calls += k.calls
	dst.local += k.local
	dst.grants += k.grants
	dst.returns += k.returns
	dst.unused += k.unused
	dst.outstanding += k.outstanding
	dst.admitted += k.admitted
}

// result is the model's answer.
type result struct {
	shards      []shardLoad
	leasedKeys  int
	leasedRanks []int
	boundOn     float64 // Σ admitted over counters that lease
	sampleShare []float64
}

func model(c config) (result, error) {
	z, err := newZipf(c.keys, c.zipf)
	if err != nil {
		return result{}, err
	}
	res := result{shards: make([]shardLoad, c.shards)}
	owner := slotShards(c.shards)
	for _, sh := range owner {
		res.shards[sh].slots++
	}
	key := make([]byte, 0, 64)
	for rank := 1; rank <= c.keys; rank++ {
		key = appendRankKey(key[:0], rank)
		sh := &res.shards[owner[keySlot(key)]]
		lam := c.rate * z.p(rank)
		lim := c.limit
		if lim == 0 {
			lim = c.ratio * lam
		}
		sh.keys++
		sh.demand += lam
		if lam > sh.hottestRate {
			sh.hottestKey, sh.hottestRate = rank, lam
		}
		sh.add(&sh.off, noLease(lam, lim, c.replicas, c.costs))
		on := withLease(lam, lim, c.replicas, c.costs, c.lease)
		sh.add(&sh.on, on)
		if on.leased {
			res.leasedKeys++
			res.boundOn += on.admitted
			if len(res.leasedRanks) < 10 {
				res.leasedRanks = append(res.leasedRanks, rank)
			}
		}
	}
	if c.samples > 0 {
		res.sampleShare = make([]float64, c.shards)
		draw := z.sampler(c.seed)
		for range c.samples {
			key = appendRankKey(key[:0], draw())
			res.sampleShare[owner[keySlot(key)]]++
		}
		for i := range res.sampleShare {
			res.sampleShare[i] /= float64(c.samples)
		}
	}
	return res, nil
}

func run(args []string, w, errOut io.Writer) error {
	c, err := parse(args, errOut)
	if err != nil {
		return err
	}
	res, err := model(c)
	if err != nil {
		return err
	}
	report(w, c, res)
	return nil
}

func report(w io.Writer, c config, res result) {
	limit := fmt.Sprintf("%g hits/s each", c.limit)
	if c.limit == 0 {
		limit = fmt.Sprintf("%g × its demand", c.ratio)
	}
	fmt.Fprintf(w, "## Model: %d replicas, %d shards, %.3g decisions/s, %d keys, Zipf s=%g\n\n", c.replicas, c.shards, c.rate, c.keys, c.zipf)
	fmt.Fprintf(w, "Limits: token_bucket, %s. Leases: ttl %gs, hot %g hits/s per replica, max fraction %g. "+
		"Costs: %g Redis µs/decision at %g EVALSHA/decision, %g µs per further EVALSHA, %g decisions per EVALSHA here.\n\n",
		limit, c.lease.ttl, c.lease.hotRPS, c.lease.maxFraction, c.costs.usPerDecision, c.costs.callsMeasured, c.costs.usPerCall, c.costs.merge)

	fmt.Fprintln(w, "| shard | slots | keys | demand dec/s | hottest key (rank, dec/s) | no leases: Redis dec/s | EVALSHA/s | commands/s | CPU (cores) | leases: Redis dec/s | EVALSHA/s | commands/s | CPU (cores) | local dec/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var tot shardLoad
	hotOff, hotOn := 0, 0
	for i, s := range res.shards {
		cpuOff := c.costs.cpu(s.off.redisDecisions, s.off.calls) / 1e6
		cpuOn := c.costs.cpu(s.on.redisDecisions, s.on.calls) / 1e6
		if cpuOff > c.costs.cpu(res.shards[hotOff].off.redisDecisions, res.shards[hotOff].off.calls)/1e6 {
			hotOff = i
		}
		if cpuOn > c.costs.cpu(res.shards[hotOn].on.redisDecisions, res.shards[hotOn].on.calls)/1e6 {
			hotOn = i
		}
		fmt.Fprintf(w, "| %d | %d | %d | %.0f | %d, %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %.2f | %.0f |\n",
			i, s.slots, s.keys, s.demand, s.hottestKey, s.hottestRate,
			s.off.redisDecisions, s.off.calls, commands(s.off), cpuOff,
			s.on.redisDecisions, s.on.calls, commands(s.on), cpuOn, s.on.local)
		tot.demand += s.demand
		tot.add(&tot.off, s.off)
		tot.add(&tot.on, s.on)
	}
	mean := func(f func(shardLoad) float64) float64 {
		var sum float64
		for _, s := range res.shards {
			sum += f(s)
		}
		return sum / float64(len(res.shards))
	}
	cpuOff := func(s shardLoad) float64 { return c.costs.cpu(s.off.redisDecisions, s.off.calls) / 1e6 }
	cpuOn := func(s shardLoad) float64 { return c.costs.cpu(s.on.redisDecisions, s.on.calls) / 1e6 }
	fmt.Fprintf(w, "| all | %d | %d | %.0f | | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %.2f | %.0f |\n\n",
		slotCount, c.keys, tot.demand, tot.off.redisDecisions, tot.off.calls, commands(tot.off), c.costs.cpu(tot.off.redisDecisions, tot.off.calls)/1e6,
		tot.on.redisDecisions, tot.on.calls, commands(tot.on), c.costs.cpu(tot.on.redisDecisions, tot.on.calls)/1e6, tot.on.local)

	ho, hn := res.shards[hotOff], res.shards[hotOn]
	fmt.Fprintf(w, "Hottest shard without leases: %d, %.2f cores (%.2f× the mean shard)%s.\n",
		hotOff, cpuOff(ho), cpuOff(ho)/mean(cpuOff), overCore(cpuOff(ho)))
	fmt.Fprintf(w, "Hottest shard with leases: %d, %.2f cores (%.2f× the mean shard)%s.\n\n",
		hotOn, cpuOn(hn), cpuOn(hn)/mean(cpuOn), overCore(cpuOn(hn)))

	fmt.Fprintf(w, "Leases: %d counters lease (hot on every replica: demand ≥ %.0f dec/s; ranks %v…); %.1f%% of decisions answered locally; "+
		"%.0f grants/s, %.0f returns/s handing back %.0f hits/s.\n",
		res.leasedKeys, c.lease.hotRPS*float64(c.replicas), res.leasedRanks, 100*tot.on.local/tot.demand, tot.on.grants, tot.on.returns, tot.on.unused)
	fmt.Fprintf(w, "Admitted vs bound: no leases, exact (0 over, 0 under). With leases, never over; "+
		"steady state under-admission 0 (each leasing counter's demand is below its limit, its bucket holds the leases); "+
		"worst case under-admission, the hits held in leases at once: %.0f hits, %.2f%% of one second's admissions of the leasing counters (%.3f%% of all).\n",
		tot.on.outstanding, pct(tot.on.outstanding, res.boundOn), pct(tot.on.outstanding, tot.off.admitted))
	if res.sampleShare != nil {
		var maxDev float64
		for i, s := range res.shards {
			maxDev = math.Max(maxDev, math.Abs(res.sampleShare[i]-s.demand/tot.demand))
		}
		fmt.Fprintf(w, "Cross-check: %d seeded Zipf draws (seed %d) give shard shares within %.4f of the model's.\n", c.samples, c.seed, maxDev)
	}
}

// commands counts the Redis commands a load runs, those inside scripts
// included (BENCHMARKS.md: per EVALSHA one TIME, per decision a GET and a
// SET … PX).
func commands(k keyLoad) float64 { return 2*k.calls + 2*k.redisDecisions }

func overCore(cores float64) string {
	if cores > 1 {
		return ": over one core, which Redis's single script thread cannot give"
	}
	return ""
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * a / b
}
