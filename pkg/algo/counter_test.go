package algo

import (
	"fmt"
	"testing"
)

// counterVariants are checks that differ from one another in one part of
// the counter identity each, or only outside it.
func counterVariants() []Check {
	pol := Policy{Algorithm: FixedWindow, Limit: 5, Period: Minute}
	base := Check{Domain: "d", Entries: []Entry{{"user", "a"}, {"path", "/x"}}, HashTag: -1, Policy: pol}
	with := func(f func(*Check)) Check {
		c := base
		c.Entries = append([]Entry(nil), base.Entries...)
		f(&c)
		return c
	}
	return []Check{
		base,
		with(func(c *Check) { c.Domain = "e" }),
		with(func(c *Check) { c.Entries[0].Value = "b" }),
		with(func(c *Check) { c.Entries[1].Key = "route" }),
		with(func(c *Check) { c.Entries = c.Entries[:1] }),
		with(func(c *Check) { c.HashTag = 0 }),
		with(func(c *Check) { c.HashTag = 1 }),
		with(func(c *Check) { c.HashTag = 7 }), // no such entry: the whole identity
		with(func(c *Check) { c.Policy.Algorithm = TokenBucket }),
		with(func(c *Check) { c.Policy.Period = Hour }),
		with(func(c *Check) { c.Policy.Limit = 10 }),
		with(func(c *Check) { c.Policy.Burst = 9 }),
		with(func(c *Check) { c.Hits, c.Refund = 3, true }),
	}
}

// TestCounterIdentityAgrees proves the definitions of "one counter" agree:
// SameCounter holds exactly when the identities are equal.
func TestCounterIdentityAgrees(t *testing.T) {
	vs := counterVariants()
	for i := range vs {
		for j := range vs {
			same := SameCounter(&vs[i], &vs[j])
			eq := string(vs[i].AppendIdentity(nil)) == string(vs[j].AppendIdentity(nil))
			if same != eq {
				t.Errorf("variants %d and %d: SameCounter %v, identities equal %v", i, j, same, eq)
			}
		}
	}
	// Out of the identity: limit, burst, hits and refund, and a hash tag
	// that names no entry.
	for _, i := range []int{7, 10, 11, 12} {
		if !SameCounter(&vs[0], &vs[i]) {
			t.Errorf("variant %d should share the base's counter", i)
		}
	}
	for _, i := range []int{1, 2, 3, 4, 5, 6, 8, 9} {
		if SameCounter(&vs[0], &vs[i]) {
			t.Errorf("variant %d should not share the base's counter", i)
		}
	}
}

func TestMerge(t *testing.T) {
	pol := func(limit, burst int64) Policy {
		return Policy{Algorithm: TokenBucket, Limit: limit, Burst: burst, Period: Minute}
	}
	user := func(p Policy, hits int64, refund bool, v string) Check {
		return Check{Domain: "d", Entries: []Entry{{"user", v}}, HashTag: -1, Policy: p, Hits: hits, Refund: refund}
	}
	tests := []struct {
		name   string
		checks []Check
		want   []Check // nil: nothing shared
		owner  []int
	}{
		{name: "distinct", checks: []Check{user(pol(5, 0), 1, false, "a"), user(pol(5, 0), 1, false, "b")}},
		{
			name:   "summed under the smaller limit",
			checks: []Check{user(pol(10, 0), 2, false, "a"), user(pol(5, 0), 3, false, "a")},
			want:   []Check{user(pol(5, 0), 5, false, "a")},
			owner:  []int{0, 0},
		},
		{
			name:   "equal limits: the smaller burst",
			checks: []Check{user(pol(5, 50), 1, false, "a"), user(pol(5, 20), 1, false, "a"), user(pol(5, 30), 1, false, "b")},
			want:   []Check{user(pol(5, 20), 2, false, "a"), user(pol(5, 30), 1, false, "b")},
			owner:  []int{0, 0, 1},
		},
		{
			name:   "refund nets against hits",
			checks: []Check{user(pol(5, 0), 4, true, "a"), user(pol(5, 0), 1, false, "a")},
			want:   []Check{user(pol(5, 0), 3, true, "a")},
			owner:  []int{0, 0},
		},
		{
			name:   "check only joins",
			checks: []Check{user(pol(5, 0), 0, false, "a"), user(pol(7, 0), 2, false, "a")},
			want:   []Check{user(pol(5, 0), 2, false, "a")},
			owner:  []int{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, owner := Merge(tt.checks)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || fmt.Sprint(owner) != fmt.Sprint(tt.owner) {
				t.Fatalf("Merge = %+v, %v; want %+v, %v", got, owner, tt.want, tt.owner)
			}
		})
	}
}

// TestApplyAllSharedCounter is the over-admission of issue 10: one request
// carrying the same descriptor twice, once with an override of the same
// period. Evaluated apart, each request's 2 hits moved the counter by 1, so
// 10 hits passed a limit of 5.
func TestApplyAllSharedCounter(t *testing.T) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			rule := Policy{Algorithm: a, Limit: 10, Period: Minute}
			override := Policy{Algorithm: a, Limit: 5, Period: Minute}
			var st State
			now := 1_700_006_400 * Second
			admitted := 0
			for range 8 {
				checks := []Check{
					{Domain: "d", Entries: []Entry{{"user", "a"}}, HashTag: -1, Policy: rule, Hits: 1},
					{Domain: "d", Entries: []Entry{{"user", "a"}}, HashTag: -1, Policy: override, Hits: 1},
				}
				states := []State{st, st}
				out := make([]Decision, 2)
				if ApplyAll(checks, states, now, out) {
					admitted += 2
				}
				if states[0].Count != states[1].Count || states[0].Time != states[1].Time || states[0].Frac != states[1].Frac ||
					len(states[0].Log) != len(states[1].Log) || out[0] != out[1] {
					t.Fatalf("checks on one counter got different results: %+v %+v, %+v %+v", states[0], states[1], out[0], out[1])
				}
				st = states[0]
				now += Second
			}
			if admitted > 5 {
				t.Fatalf("%d hits admitted through a limit of 5", admitted)
			}
			if admitted < 4 {
				t.Fatalf("only %d hits admitted: want the 2-hit requests that fit 5", admitted)
			}
		})
	}
}

func TestCost(t *testing.T) {
	tests := []struct {
		alg         Algorithm
		limit, hits int64
		want        int64
	}{
		{FixedWindow, 10, 500, 1},
		{TokenBucket, 10, 0, 1},
		{SlidingLog, 100, 0, 1},
		{SlidingLog, 100, 1, 1},
		{SlidingLog, 100, 60, 60},
		{SlidingLog, 100, 10_000, 100}, // denied: writes nothing past the limit
	}
	for _, tt := range tests {
		c := Check{Policy: Policy{Algorithm: tt.alg, Limit: tt.limit, Period: Minute}, Hits: tt.hits}
		if got := c.Cost(); got != tt.want {
			t.Errorf("Cost(%s, limit %d, hits %d) = %d, want %d", tt.alg, tt.limit, tt.hits, got, tt.want)
		}
	}
}
