package redisalgo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/randsteps"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// leanObserved is lean.lua inside observedScript's prologue and epilogue.
var leanObserved = redis.NewScript(observePrologue + strings.Replace(leanLua, "\nreturn reply\n", "\nreturn observe(reply)\n", 1))

// TestDifferentialLean holds lean.lua to algo.ApplyAll as TestDifferential
// holds apply.lua: random fixed-window requests of one to three limits,
// with hits from 1 to over the limit (a check-only request is a probe,
// which only apply.lua makes), limit changes, and both a given now
// and the server's TIME; identical decisions, stored state (which
// parseState also requires to be apply.lua's spelling) and TTLs.
func TestDifferentialLean(t *testing.T) {
	if !strings.HasSuffix(leanLua, "\nreturn reply\n") || strings.Count(leanLua, "\nreturn reply\n") != 1 {
		t.Fatal("lean.lua must end with its only `return reply` line; the differential test wraps it")
	}
	client := redistest.SharedStandalone(t).Client(t)
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runLeanDifferential(t, client, seed, 1500)
		})
	}
}

// leanPolicy is a random fixed-window policy the lean path takes (a
// positive limit).
func leanPolicy(r *rand.Rand) algo.Policy {
	for {
		if p := diffPolicy(r, algo.FixedWindow); p.Limit > 0 {
			return p
		}
	}
}

func runLeanDifferential(t *testing.T, client *redis.Client, seed uint64, steps int) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0x1ea7))
	prefix := redistest.KeyPrefix(t)
	limits := make([]diffLimit, 6)
	for i := range limits {
		limits[i] = diffLimit{key: fmt.Sprintf("%slean%d", prefix, i), p: leanPolicy(r)}
	}
	now := luaT0 + r.Int64N(algo.Day)
	var denied int
	for step := range steps {
		if r.IntN(50) == 0 {
			l := &limits[r.IntN(len(limits))]
			l.p.Limit = leanPolicy(r).Limit
		}
		var checks []algo.Check
		var keys []string
		for _, i := range r.Perm(len(limits))[:1+r.IntN(3)] {
			l := limits[i]
			hits, _ := randsteps.Hits(r, l.p.Capacity())
			hits = max(hits, 1)
			checks = append(checks, algo.Check{Entries: []algo.Entry{{Key: "key", Value: l.key}}, Policy: l.p, Hits: hits})
			keys = append(keys, l.key)
		}
		now += randsteps.Gap(r, checks[0].Policy.Period, checks[0].Policy.Limit)
		// A fixed window's key names the window holding now, so the
		// backend always gives the script its now (clock.go).
		at := now
		for i := range keys {
			keys[i] = windowKey(keys[i], checks[i].Policy, now)
		}
		res, err := leanObserved.Run(ctx, client, keys, appendApplyArgs(nil, at, checks)...).Slice()
		if err != nil || len(res) != 5 {
			t.Fatalf("step %d: observed apply.lua: %v %v", step, res, err)
		}
		luaOut := make([]algo.Decision, len(keys))
		evalNow, luaAllowed, err := parseApplyReply(res[0], luaOut)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if evalNow != at {
			t.Fatalf("step %d: evaluated at %d, want %d", step, evalNow, at)
		}
		before, after := res[1].([]any), res[2].([]any)
		states := make([]algo.State, len(keys))
		for i, k := range keys {
			if states[i], _, err = parseState(k, checks[i].Policy, before[i], evalNow); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		goOut := make([]algo.Decision, len(keys))
		goAllowed := algo.ApplyAll(checks, states, evalNow, goOut)
		if luaAllowed != goAllowed || !slices.Equal(goOut, luaOut) {
			t.Fatalf("step %d at %d, checks %+v:\n go  %v %+v\n lua %v %+v", step, evalNow, checks, goAllowed, goOut, luaAllowed, luaOut)
		}
		if !goAllowed {
			denied++
		}
		checkLeanWrites(t, step, keys, checks, states, after, res[3].([]any), res[4].(int64), goAllowed, evalNow)
	}
	if denied == 0 {
		t.Errorf("no denied request; want denials exercised")
	}
}

// checkLeanWrites compares the stored states and TTLs after a lean call
// with Go's, as runDifferential does (checkWrite).
func checkLeanWrites(t *testing.T, step int, keys []string, checks []algo.Check, states []algo.State, after, ttls []any, ran int64, allowed bool, now int64) {
	t.Helper()
	for i, k := range keys {
		checkWrite(t, step, k, checks[i], states[i], after[i], ttls[i], ran, allowed && checks[i].Hits > 0, now)
	}
}

func TestLeanChecks(t *testing.T) {
	fw := algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Second}
	tests := []struct {
		name   string
		checks []algo.Check
		want   bool
	}{
		{name: "none", checks: nil, want: false},
		{name: "one fixed window", checks: []algo.Check{{Policy: fw, Hits: 1}}, want: true},
		{name: "hits", checks: []algo.Check{{Policy: fw, Hits: 5}, {Policy: fw, Hits: 2}}, want: true},
		{name: "check-only, a probe", checks: []algo.Check{{Policy: fw, Hits: 5}, {Policy: fw, Hits: 0}}, want: false},
		{name: "charge", checks: []algo.Check{{Policy: fw, Hits: 5, Charge: true}}, want: false},
		{name: "refund", checks: []algo.Check{{Policy: fw, Hits: 1, Refund: true}}, want: false},
		{name: "take", checks: []algo.Check{{Policy: fw, Hits: 3, Take: true}}, want: false},
		{name: "zero limit", checks: []algo.Check{{Policy: algo.Policy{Algorithm: algo.FixedWindow, Period: algo.Second}, Hits: 1}}, want: false},
		{name: "burst", checks: []algo.Check{{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Second, Burst: 2}, Hits: 1}}, want: false},
		{name: "mixed", checks: []algo.Check{{Policy: fw, Hits: 1}, {Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Second}, Hits: 1}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leanChecks(tt.checks); got != tt.want {
				t.Fatalf("leanChecks = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLeanMatchesApply sends the same random merged calls (one to four
// lean requests sharing keys, now and then with a key holding a list) to
// lean.lua and apply.lua, each on its own copy of the keys, and requires
// identical replies and identical stored values: the two scripts may serve
// one counter in turn. (TestDifferentialLean covers the server's TIME.)
func TestLeanMatchesApply(t *testing.T) {
	ctx := context.Background()
	client := redistest.SharedStandalone(t).Client(t)
	r := rand.New(rand.NewPCG(7, 0x1ea7))
	prefix := redistest.KeyPrefix(t)
	// Periods of a second or more: a TTL of a few ms could run out on
	// one copy before it is read and not on the other.
	pols := make([]algo.Policy, 5)
	for i := range pols {
		for pols[i].Period < algo.Second {
			pols[i] = leanPolicy(r)
		}
	}
	for _, side := range []string{"a", "l"} {
		if err := client.RPush(ctx, prefix+side+"wrong", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := luaT0 + r.Int64N(algo.Day)
	var merged, failed int
	for step := range 800 {
		now += randsteps.Gap(r, algo.Second, 10)
		var args []any
		var names []string
		reqs := 1 + r.IntN(4)
		for range reqs {
			var checks []algo.Check
			for _, i := range r.Perm(len(pols))[:1+r.IntN(3)] {
				hits, _ := randsteps.Hits(r, pols[i].Capacity())
				checks = append(checks, algo.Check{Policy: pols[i], Hits: max(hits, 1)})
				names = append(names, strconv.Itoa(i))
			}
			if r.IntN(40) == 0 {
				checks = append(checks, algo.Check{Policy: pols[0], Hits: 1})
				names = append(names, "wrong")
				failed++
			}
			args = appendApplyArgs(args, now, checks)
		}
		if reqs > 1 {
			merged++
		}
		keys := func(side string) []string {
			out := make([]string, len(names))
			for i, n := range names {
				out[i] = prefix + side + n
			}
			return out
		}
		want, err := applyScript.Run(ctx, client, keys("a"), args...).Int64Slice()
		if err != nil {
			t.Fatalf("step %d: apply.lua: %v", step, err)
		}
		got, err := leanScript.Run(ctx, client, keys("l"), args...).Int64Slice()
		if err != nil {
			t.Fatalf("step %d: lean.lua: %v", step, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d, args %v:\n apply %v\n lean  %v", step, args, want, got)
		}
		for i := range pols {
			ka, kl := prefix+"a"+strconv.Itoa(i), prefix+"l"+strconv.Itoa(i)
			a, _ := client.Get(ctx, ka).Result()
			l, _ := client.Get(ctx, kl).Result()
			if a != l {
				t.Fatalf("step %d: key %d holds %q after apply.lua, %q after lean.lua", step, i, a, l)
			}
			// The injected clock, not Redis's, ends a state: both
			// copies live on as long.
			for _, k := range []string{ka, kl} {
				if err := client.PExpire(ctx, k, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if merged == 0 || failed == 0 {
		t.Errorf("%d merged calls, %d requests with a WRONGTYPE key; want both exercised", merged, failed)
	}
}

// TestMergeLeanApart: lean calls go to lean.lua (by EVALSHA, or EVAL with
// its source after NOSCRIPT) in commands of their own, apart from
// apply.lua's.
func TestMergeLeanApart(t *testing.T) {
	lean := func(name string, eval bool) *scriptCall {
		c := typedCall(name, 0, limits(1)...)
		c.lean, c.eval = true, eval
		return c
	}
	var m merger
	cmds := m.merge(context.Background(), []*scriptCall{lean("x", false), typedCall("y", 0, limits(1)...), lean("z", false), lean("w", true)}, algo.DefaultMaxCost)
	defer m.split()
	if got := mergedKeys(t, cmds); fmt.Sprint(got) != fmt.Sprint([]string{"y", "xz", "w"}) {
		t.Fatalf("commands carry keys %v, want [y xz w]", got)
	}
	want := [][2]any{{argEvalSHA, argSHA}, {argEvalSHA, argLeanSHA}, {argEval, argLean}}
	for i, c := range cmds {
		if a := c.Args(); a[0] != want[i][0] || a[1] != want[i][1] {
			t.Errorf("command %d is %v %.12v, want %v %.12v", i, a[0], a[1], want[i][0], want[i][1])
		}
	}
}

// TestBackendSendsLean: the backend sends a lone one-hit fixed window as
// plain commands (no script), any other request of plain fixed windows to
// lean.lua and any other to apply.lua. On a server with no script cached,
// each call's NOSCRIPT retry caches exactly the script it was sent to.
func TestBackendSendsLean(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Standalone(t)
	client := srv.Client(t)
	b := newBackend(t, client, Options{LazyLoad: true})
	cached := func() [2]bool {
		t.Helper()
		ex, err := client.ScriptExists(ctx, leanScript.Hash(), applyScript.Hash()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return [2]bool{ex[0], ex[1]}
	}
	prefix := redistest.KeyPrefix(t)
	d := backendtest.Apply(t, b, t0.UnixMicro(), backendtest.UserCheck(prefix, "p", backendtest.PerMinute(algo.FixedWindow, 2), 1))
	if !d[0].Allowed || d[0].Remaining != 1 {
		t.Fatalf("plain fixed window: %+v, want allowed with 1 remaining", d[0])
	}
	if got := cached(); got != [2]bool{false, false} {
		t.Fatalf("after a one-hit fixed-window request: lean.lua, apply.lua cached = %v, want [false false] (plain commands)", got)
	}
	d = backendtest.Apply(t, b, t0.UnixMicro(), backendtest.UserCheck(prefix, "u", backendtest.PerMinute(algo.FixedWindow, 3), 2))
	if !d[0].Allowed || d[0].Remaining != 1 {
		t.Fatalf("fixed window of 2 hits: %+v, want allowed with 1 remaining", d[0])
	}
	if got := cached(); got != [2]bool{true, false} {
		t.Fatalf("after a 2-hit fixed-window request: lean.lua, apply.lua cached = %v, want [true false]", got)
	}
	backendtest.Apply(t, b, t0.UnixMicro(), backendtest.UserCheck(prefix, "v", backendtest.PerMinute(algo.TokenBucket, 2), 1))
	if got := cached(); got != [2]bool{true, true} {
		t.Fatalf("after a token_bucket request: cached = %v, want [true true]", got)
	}
}

// TestLeanCheckIsLeanFraming: leanCheck accepts exactly the checks whose
// encoded arguments lean.lua's framing accepts, on real Redis: a check
// with MaxDelay (queue mode), a burst, a refund, a take or another
// algorithm is never sent to a script that refuses it.
func TestLeanCheckIsLeanFraming(t *testing.T) {
	ctx := context.Background()
	client := redistest.SharedStandalone(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	fw := algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Minute}
	base := algo.Check{Domain: prefix, Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1, Policy: fw, Hits: 1}
	var cases []algo.Check
	for _, a := range algo.Algorithms {
		c := base
		c.Policy.Algorithm = a
		cases = append(cases, c)
	}
	for _, f := range []func(*algo.Check){
		func(c *algo.Check) { c.Hits = 0 },
		func(c *algo.Check) { c.Hits = 3 },
		func(c *algo.Check) { c.MaxDelay = algo.Second },
		func(c *algo.Check) { c.Policy.Burst = 2 },
		func(c *algo.Check) { c.Refund = true },
		func(c *algo.Check) { c.Refund, c.ReservedAt = true, 5 },
		func(c *algo.Check) { c.Take = true },
		func(c *algo.Check) { c.Charge = true },
		func(c *algo.Check) { c.Policy.Limit = 0 },
	} {
		c := base
		f(&c)
		cases = append(cases, c)
	}
	for i, c := range cases {
		key, _ := CounterAt(prefix, c, t0.UnixMicro(), DefaultCounterHashes)
		key += strconv.Itoa(i)
		err := client.Eval(ctx, leanLua, []string{key}, appendApplyArgs(nil, t0.UnixMicro(), []algo.Check{c})...).Err()
		malformed := err != nil && strings.Contains(err.Error(), "malformed arguments")
		if err != nil && !malformed {
			t.Fatalf("case %d %+v: lean.lua: %v", i, c, err)
		}
		if leanCheck(&c) == malformed {
			t.Errorf("case %d %+v: leanCheck %v, but lean.lua's framing refuses it: %v", i, c, leanCheck(&c), malformed)
		}
	}
	c := base
	c.MaxDelay = algo.Second
	if leanCheck(&c) || plainCheck(&c) {
		t.Error("a check with MaxDelay would go to lean.lua or the plain path")
	}
}
