package redisalgo

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestKeyPrefix: every key a backend with Options.KeyPrefix writes starts
// with the prefix, and the counters stay exact (the prefix leaves the hash
// tag alone, so on a cluster a limit's keys still share a slot).
func TestKeyPrefix(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		// Unique per subtest, so the scan below sees only this test's keys.
		prefix := "pfx:" + t.Name() + ":"
		b := newBackend(t, client, Options{CallerTime: true, KeyPrefix: prefix})
		c := backendtest.UserCheck(redistest.KeyPrefix(t), "alice", backendtest.PerMinute(algo.SlidingWindow, 2), 1)
		for i, want := range []bool{true, true, false} {
			if d := backendtest.Apply(t, b, t0.UnixMicro(), c)[0]; d.Allowed != want {
				t.Fatalf("hit %d: allowed %v, want %v", i+1, d.Allowed, want)
			}
		}
		if keys := scanKeys(t, client, prefix+LayoutVersion+"*"); len(keys) == 0 {
			t.Fatalf("no key under %q", prefix+LayoutVersion)
		}
	})
}

func TestKeyPrefixRejectsBraces(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	for _, p := range []string{"{a}", "a{", "}"} {
		if b, err := New(client, Options{KeyPrefix: p, LazyLoad: true}); err == nil {
			b.Close()
			t.Errorf("New with KeyPrefix %q: no error, want one naming the hash tag", p)
		} else if !strings.Contains(err.Error(), "hash tag") {
			t.Errorf("New with KeyPrefix %q: %v, want it to name the hash tag", p, err)
		}
	}
}

// scanKeys returns the keys matching pattern on every node of client.
func scanKeys(t testing.TB, client redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 100).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		var mu chanMutex = make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("scanKeys: unexpected client %T", client)
	}
	if err != nil {
		t.Fatalf("scan %q: %v", pattern, err)
	}
	return keys
}

// chanMutex serialises ForEachMaster's concurrent callbacks.
type chanMutex chan struct{}

// TestRefundCreatesNoKey: a refund (Envoy's is_negative_hits) never
// creates a key, on a counter that has none, and never takes a counter
// below 0, whatever the algorithm (docs/rules.md, "Costs and charges").
func TestRefundCreatesNoKey(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		for _, a := range algo.Algorithms {
			t.Run(a.String(), func(t *testing.T) {
				prefix := "refund:" + t.Name() + ":"
				b := newBackend(t, client, Options{CallerTime: true, KeyPrefix: prefix})
				c := backendtest.UserCheck(redistest.KeyPrefix(t), "alice", backendtest.PerMinute(a, 5), 3)
				refund := c
				refund.Refund = true
				backendtest.Apply(t, b, t0.UnixMicro(), refund)
				if keys := scanKeys(t, client, prefix+"*"); len(keys) != 0 {
					t.Fatalf("a refund on no counter wrote %v", keys)
				}
				backendtest.Apply(t, b, t0.UnixMicro(), c)
				refund.Hits = 10
				if d := backendtest.Apply(t, b, t0.UnixMicro(), refund)[0]; !d.Allowed || d.Remaining != 5 {
					t.Fatalf("a refund of 10 after 3 hits: %+v, want the whole limit of 5 back and no more", d)
				}
				c.Hits = 0
				if d := backendtest.Apply(t, b, t0.UnixMicro(), c)[0]; d.Remaining != 5 {
					t.Fatalf("check after the refund: %+v, want remaining 5", d)
				}
			})
		}
	})
}
