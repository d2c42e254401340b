package redisalgo

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestScriptWritesTableCodec: for every row of the algorithm table (and a
// sliding window in sub-windows), apply.lua stores exactly what the
// table's codec encodes for the state algo.Step reaches, so an algorithm
// added to the table without its Lua twin (or with another encoding)
// fails here.
func TestScriptWritesTableCodec(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	b := newBackend(t, client, Options{CallerTime: true})
	pols := make([]algo.Policy, 0, len(algo.Algorithms)+1)
	for _, a := range algo.Algorithms {
		pols = append(pols, backendtest.PerMinute(a, 7))
	}
	sub := backendtest.PerMinute(algo.SlidingWindow, 7)
	sub.SubWindows = 6
	pols = append(pols, sub)
	for _, p := range pols {
		c := backendtest.UserCheck(redistest.KeyPrefix(t), "codec", p, 3)
		var s algo.State
		now := t0.UnixMicro()
		for i := range 3 {
			now += int64(i) * 7 * algo.Second
			if _, err := b.Apply(ctx, t0.Add(time.Duration(now-t0.UnixMicro())*time.Microsecond), []algo.Check{c}); err != nil {
				t.Fatal(err)
			}
			// A denied step leaves the stored state alone (algo.ApplyAll).
			if ns, d := algo.Step(p, s, now, c.Hits, false); d.Allowed {
				s = ns
			}
		}
		key, field := counter(c, now)
		spec, _ := p.Algorithm.Spec()
		if spec.Shape == algo.ShapeLog {
			got := LogState(client.ZRangeWithScores(ctx, key, 0, -1).Val())
			if !reflect.DeepEqual(got, s) {
				t.Errorf("%s: log %+v, want %+v", p.Algorithm, got, s)
			}
			for i, e := range algo.EncodeLog(s) {
				if m := client.ZRange(ctx, key, int64(i), int64(i)).Val(); len(m) != 1 || m[0] != e.Member {
					t.Errorf("%s: member %d is %q, want %q", p.Algorithm, i, m, e.Member)
				}
			}
			continue
		}
		want, err := algo.EncodeState(p, s)
		if err != nil {
			t.Fatal(err)
		}
		got := client.Get(ctx, key).Val()
		if p.KeyedWindow() {
			got = client.HGet(ctx, key, field).Val()
		}
		if got != want {
			t.Errorf("%+v: stored %q, the table's codec encodes %+v as %q", p, got, s, want)
		}
	}
}
