package algo

import (
	"testing"
)

// benchPolicy is 100 per second; the benchmark stream arrives a little
// faster, so both admissions and denials are measured.
func benchPolicy(a Algorithm) Policy { return Policy{Algorithm: a, Limit: 100, Period: Second} }

func BenchmarkStep(b *testing.B) {
	for _, a := range Algorithms {
		b.Run(a.String(), func(b *testing.B) {
			p := benchPolicy(a)
			var s State
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 9_000
				s, _ = Step(p, s, now, 1, false)
			}
		})
	}
	b.Run("sliding_log/check_only", func(b *testing.B) {
		p := benchPolicy(SlidingLog)
		var s State
		for i := range 100 {
			s, _ = Step(p, s, t0+int64(i)*1000, 1, false)
		}
		b.ReportAllocs()
		for b.Loop() {
			Step(p, s, t0+200_000, 0, false)
		}
	})
}

func BenchmarkApplyAll(b *testing.B) {
	checks := []Check{
		{Policy: Policy{Algorithm: TokenBucket, Limit: 100, Period: Second}, Hits: 1},
		{Policy: Policy{Algorithm: SlidingWindow, Limit: 1000, Period: Minute}, Hits: 1},
		{Policy: Policy{Algorithm: GCRA, Limit: 10_000, Period: Hour}, Hits: 1},
	}
	states := make([]State, len(checks))
	out := make([]Decision, len(checks))
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 9_000
		ApplyAll(checks, states, now, out)
	}
}

// TestStepAllocs pins the allocation claims: no algorithm allocates except a
// sliding log that grows its log.
func TestStepAllocs(t *testing.T) {
	for _, a := range Algorithms {
		p := benchPolicy(a)
		var s State
		now := t0
		consume := true
		if a == SlidingLog {
			// Fill the log first; at the limit every step is a denial or a
			// check, which must not allocate.
			for i := range 100 {
				s, _ = Step(p, s, now+int64(i), 1, false)
			}
			now += 1000
			consume = false
		}
		n := testing.AllocsPerRun(200, func() {
			now += 3_000
			if consume {
				s, _ = Step(p, s, now, 1, false)
				return
			}
			Step(p, s, now, 1, false)
			Step(p, s, now, 0, false)
		})
		if n != 0 {
			t.Errorf("%v: %v allocations per step", a, n)
		}
	}
	checks := []Check{
		{Policy: benchPolicy(TokenBucket), Hits: 1},
		{Policy: benchPolicy(SlidingWindow), Hits: 1},
		{Policy: benchPolicy(FixedWindow), Hits: 1},
		{Policy: benchPolicy(GCRA), Hits: 1},
	}
	states := make([]State, len(checks))
	out := make([]Decision, len(checks))
	now := t0
	if n := testing.AllocsPerRun(200, func() { now += 3_000; ApplyAll(checks, states, now, out) }); n != 0 {
		t.Errorf("ApplyAll: %v allocations", n)
	}
}
