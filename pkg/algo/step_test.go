package algo

import (
	"testing"
)

// t0 is an epoch-aligned time (a multiple of every period used in tables).
const t0 int64 = 1_700_000_000_000_000

type stepCase struct {
	at     int64 // µs after t0
	hits   int64
	refund bool
	want   Decision
}

// runSteps feeds the steps to Step in order, threading the state, and
// checks every decision.
func runSteps(t *testing.T, p Policy, steps []stepCase) State {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("policy %+v: %v", p, err)
	}
	var s State
	for i, st := range steps {
		var d Decision
		s, d = Step(p, s, t0+st.at, st.hits, st.refund)
		if d != st.want {
			t.Errorf("step %d (at +%dµs, hits %d, refund %v): got %+v, want %+v", i, st.at, st.hits, st.refund, d, st.want)
		}
	}
	return s
}

func TestStepTables(t *testing.T) {
	sec := Second
	tests := []struct {
		name  string
		p     Policy
		steps []stepCase
	}{
		{
			name: "fixed_window",
			p:    Policy{Algorithm: FixedWindow, Limit: 3, Period: sec},
			steps: []stepCase{
				{at: 100_000, hits: 1, want: Decision{Allowed: true, Remaining: 2, ResetAfter: 900_000}},
				{at: 100_000, hits: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 900_000}},
				{at: 200_000, hits: 1, want: Decision{Remaining: 0, ResetAfter: 800_000, RetryAfter: 800_000}},
				// A spent limit denies a check-only request: one hit would not fit.
				{at: 200_000, hits: 0, want: Decision{Remaining: 0, ResetAfter: 800_000, RetryAfter: 800_000}},
				{at: 200_000, hits: 4, want: Decision{Remaining: 0, ResetAfter: 800_000, RetryAfter: Never}},
				{at: 999_999, hits: 1, want: Decision{Remaining: 0, ResetAfter: 1, RetryAfter: 1}},
				{at: 1_000_000, hits: 1, want: Decision{Allowed: true, Remaining: 2, ResetAfter: sec}},
				// ResetAfter is the window's end, with hits or without.
				{at: 1_000_000, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 3, ResetAfter: sec}},
				{at: 1_000_000, hits: 5, refund: true, want: Decision{Allowed: true, Remaining: 3, ResetAfter: sec}},
			},
		},
		{
			name: "sliding_window",
			p:    Policy{Algorithm: SlidingWindow, Limit: 3, Period: sec},
			steps: []stepCase{
				{at: 100_000, hits: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 900_000}},
				// Next window: 3·rem/1e6 + 1 ≤ 3 from rem = 666 666 µs.
				{at: 200_000, hits: 1, want: Decision{Remaining: 0, ResetAfter: 800_000, RetryAfter: 1_133_334}},
				{at: 1_333_333, hits: 1, want: Decision{Remaining: 0, ResetAfter: 666_667, RetryAfter: 1}},
				{at: 1_333_334, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 666_666}},
				// Previous window weighs 1 at the start of the next one.
				{at: 2_000_000, hits: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				{at: 2_000_000, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 1, ResetAfter: sec}},
				{at: 2_500_000, hits: 0, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 500_000}},
				{at: 5_000_000, hits: 0, want: Decision{Allowed: true, Remaining: 3, ResetAfter: sec}},
			},
		},
		{
			name: "sliding_log",
			p:    Policy{Algorithm: SlidingLog, Limit: 3, Period: sec},
			steps: []stepCase{
				{at: 100_000, hits: 2, want: Decision{Allowed: true, Remaining: 1, ResetAfter: sec}},
				{at: 300_000, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				// Two must expire: the second oldest leaves at 1 100 000.
				{at: 400_000, hits: 2, want: Decision{Remaining: 0, ResetAfter: 900_000, RetryAfter: 700_000}},
				{at: 1_099_999, hits: 2, want: Decision{Remaining: 0, ResetAfter: 200_001, RetryAfter: 1}},
				{at: 1_100_000, hits: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				{at: 1_100_000, hits: 1, want: Decision{Remaining: 0, ResetAfter: sec, RetryAfter: 200_000}},
				{at: 1_100_000, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 1, ResetAfter: sec}},
				{at: 1_100_000, hits: 4, want: Decision{Remaining: 0, ResetAfter: sec, RetryAfter: Never}},
				{at: 2_100_000, hits: 0, want: Decision{Allowed: true, Remaining: 3, ResetAfter: 0}},
			},
		},
		{
			name: "token_bucket",
			p:    Policy{Algorithm: TokenBucket, Limit: 3, Period: sec},
			steps: []stepCase{
				{at: 0, hits: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				// Debt 999 999 µs must fall to 2·T = 666 666.67 µs.
				{at: 1, hits: 1, want: Decision{Remaining: 0, ResetAfter: 999_999, RetryAfter: 333_333}},
				{at: 333_333, hits: 1, want: Decision{Remaining: 0, ResetAfter: 666_667, RetryAfter: 1}},
				// TAT becomes t0 + 1 333 333⅓ µs.
				{at: 333_334, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				{at: 666_667, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				{at: 666_667, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 666_667}},
				{at: 2_000_000, hits: 0, want: Decision{Allowed: true, Remaining: 3, ResetAfter: 0}},
				{at: 2_000_000, hits: 4, want: Decision{Remaining: 0, ResetAfter: 0, RetryAfter: Never}},
			},
		},
		{
			name: "token_bucket_burst",
			p:    Policy{Algorithm: TokenBucket, Limit: 2, Period: sec, Burst: 5},
			steps: []stepCase{
				{at: 0, hits: 5, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2_500_000}},
				{at: 499_999, hits: 1, want: Decision{Remaining: 0, ResetAfter: 2_000_001, RetryAfter: 1}},
				{at: 500_000, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 2_500_000}},
				{at: 1_500_000, hits: 0, want: Decision{Allowed: true, Remaining: 2, ResetAfter: 1_500_000}},
			},
		},
		{
			// T = 333 333⅓ µs: gcra keeps TAT exact, so a burst of 3 at
			// one instant passes whole, as with token_bucket.
			name: "gcra",
			p:    Policy{Algorithm: GCRA, Limit: 3, Period: sec},
			steps: []stepCase{
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 2, ResetAfter: 333_334}},
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 1, ResetAfter: 666_667}},
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				// Debt 999 999 µs must fall to 2·T = 666 666⅔ µs.
				{at: 1, hits: 1, want: Decision{Remaining: 0, ResetAfter: 999_999, RetryAfter: 333_333}},
				// A refund moves TAT back by exactly T, to t0 + 666 666⅔ µs.
				{at: 333_334, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 2, ResetAfter: 333_333}},
				{at: 333_334, hits: 2, want: Decision{Allowed: true, Remaining: 0, ResetAfter: sec}},
				{at: 333_334, hits: 1, want: Decision{Remaining: 0, ResetAfter: sec, RetryAfter: 333_333}},
				{at: 2_000_000, hits: 0, want: Decision{Allowed: true, Remaining: 3, ResetAfter: 0}},
				{at: 2_000_000, hits: 4, want: Decision{Remaining: 0, ResetAfter: 0, RetryAfter: Never}},
			},
		},
		{
			// T = 3⅓ µs. Rounding TAT up to whole µs per admission would
			// make the first three hits cost 12 µs instead of 10 and deny
			// the next 7.
			name: "gcra_high_rate",
			p:    Policy{Algorithm: GCRA, Limit: 300_000, Period: sec, Burst: 10},
			steps: []stepCase{
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 9, ResetAfter: 4}},
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 8, ResetAfter: 7}},
				{at: 0, hits: 1, want: Decision{Allowed: true, Remaining: 7, ResetAfter: 10}},
				{at: 0, hits: 7, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 34}},
				{at: 0, hits: 1, want: Decision{Remaining: 0, ResetAfter: 34, RetryAfter: 4}},
				{at: 10, hits: 3, want: Decision{Allowed: true, Remaining: 0, ResetAfter: 34}},
			},
		},
		{
			name: "zero_limit_blocks",
			p:    Policy{Algorithm: TokenBucket, Limit: 0, Period: Minute, Burst: 10},
			steps: []stepCase{
				// A block rule denies checks too; its reset is the end of the
				// minute, as envoyproxy/ratelimit reports.
				{at: 0, hits: 1, want: Decision{Remaining: 0, ResetAfter: Minute - t0%Minute, RetryAfter: Never}},
				{at: 0, hits: 0, want: Decision{Remaining: 0, ResetAfter: Minute - t0%Minute, RetryAfter: Never}},
				{at: 0, hits: 1, refund: true, want: Decision{Allowed: true, Remaining: 0, ResetAfter: Minute - t0%Minute}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, tt.p, tt.steps)
		})
	}
}

// TestStepDoesNotModifyState guards purity: a sliding log that grows or
// shrinks must leave the caller's entries as they were.
func TestStepDoesNotModifyState(t *testing.T) {
	p := Policy{Algorithm: SlidingLog, Limit: 10, Period: Second}
	log := make([]int64, 3, 8)
	copy(log, []int64{t0 + 10, t0 + 20, t0 + 30})
	s := State{Log: log}
	want := []int64{t0 + 10, t0 + 20, t0 + 30}
	for _, c := range []struct {
		now, hits int64
		refund    bool
	}{{t0 + 40, 2, false}, {t0 + 15, 2, false}, {t0 + 40, 2, true}, {t0 + Second + 25, 1, false}} {
		Step(p, s, c.now, c.hits, c.refund)
		for i := range want {
			if s.Log[i] != want[i] || len(s.Log) != 3 {
				t.Fatalf("Step(now=%d, hits=%d, refund=%v) changed the input log to %v", c.now, c.hits, c.refund, s.Log)
			}
		}
	}
	// An insertion before the newest entry keeps the log sorted.
	ns, d := Step(p, s, t0+15, 2, false)
	if !d.Allowed || len(ns.Log) != 5 || ns.Log[1] != t0+15 || ns.Log[2] != t0+15 || ns.Log[4] != t0+30 {
		t.Fatalf("insert before newest: got %v %+v", ns.Log, d)
	}
}

func TestApplyAll(t *testing.T) {
	perSec := func(a Algorithm, limit int64) Policy { return Policy{Algorithm: a, Limit: limit, Period: Second} }
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			checks := []Check{
				{Entries: []Entry{{"k", "first"}}, Policy: perSec(a, 10), Hits: 3},
				{Entries: []Entry{{"k", "second"}}, Policy: perSec(FixedWindow, 2), Hits: 3},
			}
			states := make([]State, 2)
			out := make([]Decision, 2)
			if ApplyAll(checks, states, t0, out) {
				t.Fatal("request with a denied limit was allowed")
			}
			if _, want := Step(checks[0].Policy, State{}, t0, 0, false); out[0] != want || !out[0].Allowed || out[0].Remaining != 10 {
				t.Errorf("admitting limit of a denied request: got %+v, want its unchanged check-only decision %+v", out[0], want)
			}
			if out[1].Allowed || out[1].Remaining != 0 || out[1].RetryAfter != Never {
				t.Errorf("denying limit: got %+v", out[1])
			}
			if Expiry(checks[0].Policy, states[0], t0) != 0 || Expiry(checks[1].Policy, states[1], t0) != 0 {
				t.Fatalf("a denied request changed state: %+v", states)
			}
			// Afterwards the first limit still has its whole quota.
			if _, d := Step(checks[0].Policy, states[0], t0, 0, false); d.Remaining != 10 {
				t.Errorf("first limit after the denied request: remaining %d, want 10", d.Remaining)
			}

			checks[1].Hits = 2
			if !ApplyAll(checks, states, t0, out) {
				t.Fatalf("request within both limits denied: %+v", out)
			}
			if out[0].Remaining != 7 || out[1].Remaining != 0 {
				t.Errorf("admitted request: got %+v", out)
			}

			// A refund applies even when another limit denies.
			checks[0].Refund, checks[0].Hits = true, 2
			checks[1].Hits = 1
			if ApplyAll(checks, states, t0, out) {
				t.Fatal("request over the second limit allowed")
			}
			if !out[0].Allowed || out[0].Remaining != 9 {
				t.Errorf("refund in a denied request: got %+v, want remaining 9", out[0])
			}
			if _, d := Step(checks[0].Policy, states[0], t0, 0, false); d.Remaining != 9 {
				t.Errorf("refund not stored: remaining %d, want 9", d.Remaining)
			}
		})
	}
}

func TestApplyAllCheckOnlyDenialBlocks(t *testing.T) {
	// A limit lowered under its count makes a check-only check deny; the
	// request is then over the limit and must consume nothing elsewhere.
	lowered := Policy{Algorithm: FixedWindow, Limit: 5, Period: Second}
	states := []State{{}, {}}
	states[0], _ = Step(lowered, states[0], t0, 5, false)
	lowered.Limit = 3
	other := Policy{Algorithm: TokenBucket, Limit: 4, Period: Second}
	checks := []Check{{Policy: lowered, Hits: 0}, {Policy: other, Hits: 1}}
	out := make([]Decision, 2)
	if ApplyAll(checks, states, t0, out) {
		t.Fatal("check-only over the limit did not deny the request")
	}
	// Remaining says how far the lowered limit is overdrawn: 5 of 3.
	if out[0].Allowed || out[0].Remaining != -2 || !out[1].Allowed || out[1].Remaining != 4 {
		t.Fatalf("got %+v", out)
	}
	if states[1].Time != 0 || states[1].Frac != 0 {
		t.Fatalf("the token bucket consumed in a denied request: %+v", states[1])
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		ok   bool
	}{
		{"fixed", Policy{Algorithm: FixedWindow, Limit: 100, Period: Second}, true},
		{"zero_limit", Policy{Algorithm: GCRA, Limit: 0, Period: Second, Burst: 9}, true},
		{"max_limit_year", Policy{Algorithm: SlidingWindow, Limit: MaxLimit, Period: Year}, true},
		{"unknown_algorithm", Policy{Algorithm: 9, Limit: 1, Period: Second}, false},
		{"zero_algorithm", Policy{Limit: 1, Period: Second}, false},
		{"negative_limit", Policy{Algorithm: FixedWindow, Limit: -1, Period: Second}, false},
		{"limit_too_big", Policy{Algorithm: FixedWindow, Limit: MaxLimit + 1, Period: Second}, false},
		{"zero_period", Policy{Algorithm: FixedWindow, Limit: 1}, false},
		{"period_too_long", Policy{Algorithm: FixedWindow, Limit: 1, Period: MaxPeriod + 1}, false},
		{"negative_burst", Policy{Algorithm: TokenBucket, Limit: 1, Period: Second, Burst: -1}, false},
		{"log_at_cap", Policy{Algorithm: SlidingLog, Limit: DefaultSlidingLogCap, Period: Second}, true},
		{"log_above_cap", Policy{Algorithm: SlidingLog, Limit: DefaultSlidingLogCap + 1, Period: Second}, false},
		{"burst_times_limit_2^53", Policy{Algorithm: TokenBucket, Limit: 1 << 26, Period: Second, Burst: 1 << 27}, false},
		{"burst_times_limit_below_2^53", Policy{Algorithm: TokenBucket, Limit: 1 << 26, Period: Second, Burst: 1<<27 - 1}, true},
		{"refill_too_long", Policy{Algorithm: GCRA, Limit: 1, Period: Year, Burst: 100}, false},
		{"refill_max", Policy{Algorithm: GCRA, Limit: 1, Period: 1 << 40, Burst: 1 << 10}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tt.p, err, tt.ok)
			}
		})
	}
	if err := (Policy{Algorithm: SlidingLog, Limit: 50_000, Period: Second}).ValidateWithLogCap(100_000); err != nil {
		t.Errorf("raised cap: %v", err)
	}
	if err := (Policy{Algorithm: FixedWindow, Limit: 1, Period: Second}).ValidateWithLogCap(MaxSlidingLogCap + 1); err == nil {
		t.Error("cap above MaxSlidingLogCap accepted")
	}
}

func TestAppendIdentity(t *testing.T) {
	base := Check{Domain: "d", Entries: []Entry{{"a", "b"}}, HashTag: -1, Policy: Policy{Algorithm: FixedWindow, Limit: 1, Period: Second}}
	same := base
	same.Policy.Limit, same.Policy.Burst, same.Hits, same.Refund, same.HashTag = 99, 7, 5, true, 3
	if string(base.AppendIdentity(nil)) != string(same.AppendIdentity(nil)) {
		t.Error("limit, burst, hits, refund or an out-of-range hash tag changed the identity")
	}
	variants := []Check{
		base,
		{Domain: "d", Entries: []Entry{{"ab", ""}}, Policy: base.Policy},
		{Domain: "d", Entries: []Entry{{"a", ""}, {"b", ""}}, Policy: base.Policy},
		{Domain: "da", Entries: []Entry{{"", "b"}}, Policy: base.Policy},
		{Domain: "d", Entries: []Entry{{"a", "b"}}, Policy: Policy{Algorithm: TokenBucket, Limit: 1, Period: Second}},
		{Domain: "d", Entries: []Entry{{"a", "b"}}, Policy: Policy{Algorithm: FixedWindow, Limit: 1, Period: Minute}},
		{Domain: "d", Entries: []Entry{{"a", "b"}, {"", ""}}, Policy: base.Policy},
		{Domain: "", Entries: []Entry{{"d", "a"}, {"b", ""}}, Policy: base.Policy},
		{Domain: "d", Entries: []Entry{{"a", "b"}}, HashTag: 0, Policy: base.Policy},
	}
	seen := map[string]int{}
	for i, c := range variants {
		id := string(c.AppendIdentity([]byte("prefix")))[len("prefix"):]
		if j, ok := seen[id]; ok {
			t.Errorf("variants %d and %d share identity %q", j, i, id)
		}
		seen[id] = i
	}
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = base.AppendIdentity(buf[:0]) }); n != 0 {
		t.Errorf("AppendIdentity allocates %v times with room in dst", n)
	}
}
