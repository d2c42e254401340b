package redisalgo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/randsteps"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// applyRequestHead starts apply.lua's general path for one request.
const applyRequestHead = "local function applyRequest(r, now, reply)\n"

// leanObserved is observedScript with the general path's applyRequest
// failing every request it is given: a call that the lean path does not
// take answers status 3 (ErrScriptFailed), so a call that decides at all
// was decided by the lean path.
var leanObserved = redis.NewScript(observePrologue + strings.Replace(
	strings.Replace(applyLua, "\nreturn reply\n", "\nreturn observe(reply)\n", 1),
	applyRequestHead, applyRequestHead+"  error('general path')\n", 1))

// TestDifferentialLean holds apply.lua's lean path (every limit a plain
// fixed window) to algo.ApplyAll as TestDifferential holds the general
// path: random fixed-window requests of one to three limits, with hits
// from 0 to over the limit, limit changes, and both a given now and the
// server's TIME; identical decisions, stored state and TTLs.
func TestDifferentialLean(t *testing.T) {
	if strings.Count(applyLua, applyRequestHead) != 1 {
		t.Fatalf("apply.lua must define applyRequest once as %q; the lean test disables it", applyRequestHead)
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
	var denied, serverTime int
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
			checks = append(checks, algo.Check{Entries: []algo.Entry{{Key: "key", Value: l.key}}, Policy: l.p, Hits: hits})
			keys = append(keys, l.key)
		}
		now += randsteps.Gap(r, checks[0].Policy.Period, checks[0].Policy.Limit)
		at := now
		if r.IntN(5) == 0 {
			at = 0 // the server's TIME, as production calls it
			serverTime++
		}
		res, err := leanObserved.Run(ctx, client, keys, appendApplyArgs(nil, at, checks)...).Slice()
		if err != nil || len(res) != 5 {
			t.Fatalf("step %d: observed apply.lua: %v %v", step, res, err)
		}
		luaOut := make([]algo.Decision, len(keys))
		evalNow, luaAllowed, err := parseApplyReply(res[0], luaOut)
		if err != nil {
			t.Fatalf("step %d: %v (a failed request here means the general path ran)", step, err)
		}
		if at != 0 && evalNow != at {
			t.Fatalf("step %d: evaluated at %d, want %d", step, evalNow, at)
		}
		before, after := res[1].([]any), res[2].([]any)
		states := make([]algo.State, len(keys))
		for i, k := range keys {
			if states[i], _, err = parseState(k, checks[i].Policy, before[i]); err != nil {
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
	if denied == 0 || serverTime == 0 {
		t.Errorf("%d denied requests, %d at the server's TIME; want both exercised", denied, serverTime)
	}
}

// checkLeanWrites compares the stored states and TTLs after a lean call
// with Go's, as runDifferential does.
func checkLeanWrites(t *testing.T, step int, keys []string, checks []algo.Check, states []algo.State, after, ttls []any, ran int64, allowed bool, now int64) {
	t.Helper()
	for i, k := range keys {
		p := checks[i].Policy
		got, present, err := parseState(k, p, after[i])
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		e := algo.Expiry(p, states[i], now)
		written := allowed && checks[i].Hits > 0
		if !present {
			if e != 0 && !(written && (e+999)/1000 <= ran/1000+1) {
				t.Fatalf("step %d: %s (%+v) missing on Redis, Go state %+v expires in %dµs", step, k, p, states[i], e)
			}
			continue
		}
		if !sameState(p.Algorithm, got, states[i]) {
			t.Fatalf("step %d: %s (%+v, check %+v):\n go    %+v\n redis %+v", step, k, p, checks[i], states[i], got)
		}
		ms, want := ttls[i].(int64), (e+999)/1000
		if written && (ms > want || ms < want-ran/1000-1) {
			t.Fatalf("step %d: %s PTTL %dms, want %dms (Expiry %dµs rounded up; script ran %dµs)", step, k, ms, want, e, ran)
		}
	}
}
