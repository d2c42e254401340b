package main

import (
	"bytes"
	"io"
	"math"
	"strings"
	"testing"
)

func TestKeySlot(t *testing.T) {
	// Slots as `redis-cli CLUSTER KEYSLOT` reports them (redis-server
	// 7.0.15 with cluster-enabled).
	tests := []struct {
		key  string
		slot int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"somekey", 11058},
		{"123456789", 12739},
		{"foo{hash_tag}", 2515},
		{"foo{}{bar}", 8363},    // empty tag: the whole key
		{"foo{{bar}}zap", 4015}, // tag "{bar"
		{"r3{perf:key:user-1:t1}", 8309},
		{"r3{perf:key:user-2:t1}", 15273},
		{"r3{perf:key:user-9999999:t1}", 14086},
	}
	for _, tt := range tests {
		if got := keySlot([]byte(tt.key)); got != tt.slot {
			t.Errorf("keySlot(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}

func TestAppendRankKey(t *testing.T) {
	if got := string(appendRankKey(nil, 4000000)); got != "r3{perf:key:user-4000000:t1}" {
		t.Errorf("appendRankKey = %q", got)
	}
}

func TestSlotShards(t *testing.T) {
	tests := []struct {
		name   string
		shards int
		// last slot of each shard, as redis-cli --cluster create assigns
		// them (3 masters: 0-5460, 5461-10922, 10923-16383).
		lasts []int
	}{
		{"one", 1, []int{16383}},
		{"three", 3, []int{5460, 10922, 16383}},
		{"twelve", 12, []int{1364, 2730, 4095, 5460, 6826, 8191, 9556, 10922, 12287, 13652, 15018, 16383}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			owner := slotShards(tt.shards)
			if len(owner) != slotCount {
				t.Fatalf("len = %d, want %d", len(owner), slotCount)
			}
			for i, last := range tt.lasts {
				if owner[last] != i || (last+1 < slotCount && owner[last+1] != i+1) {
					t.Errorf("shard %d should end at slot %d: owner[%d] = %d, owner[%d+1] = %d", i, last, last, owner[last], last, owner[min(last+1, slotCount-1)])
				}
			}
		})
	}
}

func TestZipfProbabilities(t *testing.T) {
	z, err := newZipf(1000, 1.1)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for k := 1; k <= z.n; k++ {
		sum += z.p(k)
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("Σ p = %v, want 1", sum)
	}
	if got, want := z.p(1)/z.p(2), math.Pow(2, 1.1); math.Abs(got-want) > 1e-12 {
		t.Errorf("p(1)/p(2) = %v, want 2^1.1 = %v", got, want)
	}
}

func TestZipfSampler(t *testing.T) {
	z, err := newZipf(10_000, 1.1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 400_000
	a, b := z.sampler(7), z.sampler(7)
	counts := make([]int, z.n+1)
	for range n {
		x := a()
		if x != b() {
			t.Fatal("two samplers with one seed differ")
		}
		if x < 1 || x > z.n {
			t.Fatalf("rank %d out of 1..%d", x, z.n)
		}
		counts[x]++
	}
	// A fixed seed makes this deterministic; 5 standard deviations keep it
	// meaningful for any seed.
	for _, k := range []int{1, 2, 3, 10, 100} {
		p := z.p(k)
		sd := math.Sqrt(n * p * (1 - p))
		if got := float64(counts[k]); math.Abs(got-n*p) > 5*sd {
			t.Errorf("rank %d drawn %v times, want %.0f ± %.0f", k, got, n*p, 5*sd)
		}
	}
}

func TestNewZipfRejects(t *testing.T) {
	tests := []struct {
		name string
		n    int
		s    float64
		want string
	}{
		{"no keys", 0, 1.1, "zipf keys 0"},
		{"s = 1", 10, 1, "zipf exponent 1"},
		{"NaN", 10, math.NaN(), "zipf exponent NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newZipf(tt.n, tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestLeaseLife(t *testing.T) {
	tests := []struct {
		name                     string
		r, k, ttl                float64
		life, pShort, unused     float64
		lifeTol, pTol, unusedTol float64
	}{
		// Arrivals far faster than the lease: it is spent in k/r, never
		// returned.
		{name: "spent", r: 10_000, k: 20, ttl: 0.2, life: 20.0 / 10_000, lifeTol: 1e-3, pShort: 0, pTol: 1e-9, unused: 0, unusedTol: 1e-9},
		// Almost no arrivals: it lives its ttl and goes back whole.
		{name: "idle", r: 0.001, k: 20, ttl: 0.2, life: 0.2, lifeTol: 1e-3, pShort: 1, pTol: 1e-3, unused: 20, unusedTol: 0.01},
		// k = r·ttl: the mean arrival count equals k, so about half the
		// leases end at the ttl with some hits left.
		// k = 2 at μ = r·ttl = 2, in closed form: P(N < 2) = 3e^-2,
		// E[(2 − N)⁺] = 4e^-2, ∫₀^0.2 e^-10t (1 + 10t) dt = 0.1(2 − 4e^-2).
		{name: "closed form", r: 10, k: 2, ttl: 0.2, life: 0.1 * (2 - 4*math.Exp(-2)), lifeTol: 1e-5, pShort: 3 * math.Exp(-2), pTol: 1e-9, unused: 4 * math.Exp(-2), unusedTol: 1e-9},
		{name: "matched", r: 1000, k: 200, ttl: 0.2, life: 0.2, lifeTol: 0.01, pShort: 0.5, pTol: 0.05, unused: 5.6, unusedTol: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			life, p, u := leaseLife(tt.r, tt.k, tt.ttl)
			if math.Abs(life-tt.life) > tt.lifeTol || math.Abs(p-tt.pShort) > tt.pTol || math.Abs(u-tt.unused) > tt.unusedTol {
				t.Errorf("leaseLife = (%v, %v, %v), want (%v±%v, %v±%v, %v±%v)", life, p, u, tt.life, tt.lifeTol, tt.pShort, tt.pTol, tt.unused, tt.unusedTol)
			}
		})
	}
}

func TestLeaseModel(t *testing.T) {
	c := costs{usPerDecision: 19.5, callsMeasured: 0.111, usPerCall: 8.3, merge: 1}
	lp := leaseParams{ttl: 0.2, hotRPS: 100, maxFraction: 0.1}
	tests := []struct {
		name        string
		lam, lim    float64
		replicas    int
		leased      bool
		maxRedis    float64 // Redis decisions/s at most
		outstanding float64
	}{
		// 50 hits/s per replica: cold, every decision goes to Redis.
		{name: "cold", lam: 10_000, lim: 20_000, replicas: 200, maxRedis: 10_000},
		// 1 000 hits/s per replica, k = 200: about 5 grants and 2.5 returns
		// per replica per second instead of 1 000 decisions.
		{name: "hot", lam: 200_000, lim: 400_000, replicas: 200, leased: true, maxRedis: 200 * 8, outstanding: 200 * 200},
		// Under the fraction cap k = r·ttl: 190 hits each, 0.2 s of demand.
		{name: "near the limit", lam: 190_000, lim: 200_000, replicas: 200, leased: true, maxRedis: 200 * 8, outstanding: 200 * 190},
		// Two replicas at 95 000 hits/s: r·ttl = 19 000 exceeds f × (B −
		// λ·ttl), so the fraction caps k: Rem = B/(1+R·f) = 166 666, k = 16 666.
		{name: "fraction cap", lam: 190_000, lim: 200_000, replicas: 2, leased: true, maxRedis: 30, outstanding: 2 * 16666},
		// Over its limit the bucket is empty: no lease, exact. The deny
		// cache lets each replica ask about once per token.
		{name: "over limit", lam: 200_000, lim: 100, replicas: 200, maxRedis: 100 + 200*100},
		// One replica: the fraction cap, Rem = 4 000/1.1, k = 363.
		{name: "one replica", lam: 2_000, lim: 4_000, replicas: 1, leased: true, maxRedis: 30, outstanding: 363},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withLease(tt.lam, tt.lim, tt.replicas, c, lp)
			if got.leased != tt.leased {
				t.Fatalf("leased = %v, want %v (%+v)", got.leased, tt.leased, got)
			}
			if got.redisDecisions > tt.maxRedis {
				t.Errorf("Redis decisions %.0f/s, want ≤ %.0f", got.redisDecisions, tt.maxRedis)
			}
			if got.admitted != math.Min(tt.lam, tt.lim) {
				t.Errorf("admitted %v, want min(demand, limit) = %v: leases neither over- nor under-admit in steady state", got.admitted, math.Min(tt.lam, tt.lim))
			}
			if got.leased {
				// Every decision is answered once: locally or by a grant.
				if math.Abs(got.local+got.grants-tt.lam) > 1e-6*tt.lam {
					t.Errorf("local %v + grants %v ≠ demand %v", got.local, got.grants, tt.lam)
				}
				// Renewal: each lease serves k − (hits it hands back); with
				// the grants' own hits that is the whole demand.
				if k := got.outstanding / float64(tt.replicas); math.Abs(got.grants*k-got.unused-got.local) > 1e-3*tt.lam {
					t.Errorf("leases serve grants×k − unused = %v, want the local decisions %v", got.grants*k-got.unused, got.local)
				}
				if got.outstanding != tt.outstanding {
					t.Errorf("outstanding %v, want %v", got.outstanding, tt.outstanding)
				}
				if got.outstanding > tt.lim {
					t.Errorf("outstanding %v exceeds the burst %v: the leases would over-take", got.outstanding, tt.lim)
				}
			}
			off := noLease(tt.lam, tt.lim, tt.replicas, c)
			if got.redisDecisions > off.redisDecisions {
				t.Errorf("leases cost Redis %v decisions/s, more than without (%v)", got.redisDecisions, off.redisDecisions)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-replicas", "0"}, "-replicas 0"},
		{[]string{"-shards", "20000"}, "-shards 20000"},
		{[]string{"-rate", "-1"}, "-rate -1"},
		{[]string{"-keys", "3e8"}, "-keys 3e+08"},
		{[]string{"-limit", "0", "-limit-ratio", "0"}, "-limit-ratio 0"},
		{[]string{"-lease-max-fraction", "1.5"}, "-lease-max-fraction 1.5"},
		{[]string{"-merge", "0.5"}, "-merge"},
		{[]string{"-zipf", "abc"}, "invalid value"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parse(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestRunSmall(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-replicas", "4", "-shards", "3", "-rate", "2e4", "-keys", "1e4", "-samples", "10000"}
	if err := run(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| all | 16384 | 10000 | 20000 |", "Hottest shard without leases", "Admitted vs bound", "Cross-check"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	c, err := parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := model(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := model(c)
	var demand, off float64
	for i, s := range a.shards {
		demand += s.demand
		off += s.off.redisDecisions
		if s != b.shards[i] || a.sampleShare[i] != b.sampleShare[i] {
			t.Errorf("shard %d differs between two runs of one seed", i)
		}
	}
	if math.Abs(demand-2e4) > 1e-6 || math.Abs(off-2e4) > 1e-6 {
		t.Errorf("demand %v, Redis decisions without leases %v, want both 20000 (every limit above its demand)", demand, off)
	}
}
