package failover_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// longValue makes a key part long enough to be replaced by its SHA-256
// (pkg/redisalgo/key.go).
var longValue = strings.Repeat("v", 300)

// routeChecks are the requests of TestClusterRoutesOnce and
// BenchmarkClusterStackApply: one check, and several on different keys
// (long values: each key's SHA-256 path), some of them fixed windows, whose
// window is placed on their master's clock.
func routeChecks(dom string) map[string][]algo.Check {
	check := func(a algo.Algorithm, user string) algo.Check {
		return algo.Check{Domain: dom, Entries: []algo.Entry{{Key: "user", Value: user + longValue}}, HashTag: -1,
			Policy: algo.Policy{Algorithm: a, Limit: 1 << 40, Period: algo.Hour}, Hits: 1}
	}
	return map[string][]algo.Check{
		"one token bucket": {check(algo.TokenBucket, "a")},
		"one fixed window": {check(algo.FixedWindow, "b")},
		"five, mixed": {check(algo.TokenBucket, "c"), check(algo.FixedWindow, "d"), check(algo.GCRA, "e"),
			check(algo.FixedWindow, "f"), check(algo.TokenBucket, "g")},
	}
}

// clusterStack returns the Redis Cluster backend over a counting client
// of the shared cluster and the failure policy around it with a breaker
// per master, as pkg/stack builds them.
func clusterStack(t testing.TB) (*redistest.LookupCounter, *failover.Backend) {
	t.Helper()
	cl := redistest.SharedCluster(t)
	cc := &redistest.LookupCounter{ClusterClient: cl.ClusterClient(t)}
	rb, err := redisalgo.NewCluster(cc, redisalgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.Close)
	return cc, mustNew(t, rb, sharded(rb, failover.Options{Mode: failover.ModeError, Timeout: 10 * time.Second}))
}

// TestClusterRoutesOnce (issue 39, item 8): on a Cluster, a request through
// the failure policy looks its checks' masters up once per hash slot, from
// the keys the backend builds to send: the breakers are asked with the
// masters those keys were routed to. Before, the failure policy had every
// check's key built a second time and looked up to ask its master's
// breaker (2 lookups per single-check request, 10 for five checks in five
// slots), and a fixed window's key was looked up again for its master's
// clock.
func TestClusterRoutesOnce(t *testing.T) {
	ctx := context.Background()
	cc, fb := clusterStack(t)
	for name, checks := range routeChecks(redistest.KeyPrefix(t)) {
		t.Run(name, func(t *testing.T) {
			slots := map[int64]bool{}
			for _, c := range checks {
				key := string(redisalgo.AppendKey(nil, c, redisalgo.DefaultCounterHashes))
				slot, err := cc.ClusterKeySlot(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				slots[slot] = true
			}
			for i := range 3 {
				before := cc.Lookups.Load()
				if _, err := fb.Apply(ctx, time.Now(), checks); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got := cc.Lookups.Load() - before; got != int64(len(slots)) {
					t.Errorf("request %d of %d checks in %d slots: %d master lookups, want one per slot", i, len(checks), len(slots), got)
				}
			}
		})
	}
}

// BenchmarkClusterStackApply measures a request through the failure
// policy on the Redis Cluster backend, keys long enough for their SHA-256.
func BenchmarkClusterStackApply(b *testing.B) {
	ctx := context.Background()
	_, fb := clusterStack(b)
	for _, name := range []string{"one token bucket", "five, mixed"} {
		checks := routeChecks(fmt.Sprintf("%s#%s", redistest.KeyPrefix(b), name))[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fb.Apply(ctx, time.Now(), checks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
