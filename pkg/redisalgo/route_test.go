package redisalgo

import (
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestClockClusterOneMasterLookupPerCheck: on a Cluster, at Redis's time, a
// request looks each check's master up once: the master whose clock placed
// a fixed window's check (requestNows) is the one its call is routed to,
// not looked up again; a request with no fixed window looks each slot
// group's master up once, as it is routed.
func TestClockClusterOneMasterLookupPerCheck(t *testing.T) {
	cl := redistest.SharedCluster(t)
	mc := &redistest.LookupCounter{ClusterClient: cl.ClusterClient(t)}
	b, err := NewCluster(mc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dom := redistest.KeyPrefix(t)
	for _, a := range []algo.Algorithm{algo.FixedWindow, algo.TokenBucket} {
		t.Run(a.String(), func(t *testing.T) {
			var checks []algo.Check
			slots := map[int]bool{}
			for i := range 6 {
				c := backendtest.UserCheck(dom, fmt.Sprint(a, "user", i), backendtest.PerMinute(a, 2), 1)
				checks = append(checks, c)
				slots[keySlot(keyOf(c))] = true
			}
			if len(slots) != len(checks) {
				t.Fatalf("the checks span %d slots; want %d", len(slots), len(checks))
			}
			before := mc.Lookups.Load()
			for i, d := range backendtest.Apply(t, b, time.Now().UnixMicro(), checks...) {
				if !d.Allowed {
					t.Fatalf("check %d: %+v, want allowed", i, d)
				}
			}
			if n := mc.Lookups.Load() - before; n != int64(len(checks)) {
				t.Fatalf("%d MasterForKey calls for %d checks in %d slot groups; want one per check", n, len(checks), len(checks))
			}
		})
	}
}
