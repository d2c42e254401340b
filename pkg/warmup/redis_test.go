package warmup

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestRedisAnchors: on standalone Redis, Cluster and Sentinel, two
// replicas (two clients) asking for one ramp's anchor get one value, set
// once from Redis TIME; the key has the anchor layout and a TTL; an anchor
// Redis lost is restored from what a replica knew, not set anew; and an
// Adjuster on it ramps from that anchor.
func TestRedisAnchors(t *testing.T) {
	sets := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.SharedStandalone(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).ClusterClient(t) }},
		{"sentinel", func(t *testing.T) redis.UniversalClient { return redistest.SharedSentinel(t).FailoverClient(t) }},
	}
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			ctx := context.Background()
			c1, c2 := set.client(t), set.client(t)
			prefix := redistest.KeyPrefix(t)
			r1, r2 := NewRedisAnchors(c1, prefix), NewRedisAnchors(c2, prefix)
			const id = "00112233445566778899aabbccddeeff"
			key := r1.Key("shop:eu", id)
			if want := prefix + "r2w{shop%3Aeu:" + id + "}"; key != want {
				t.Fatalf("key %q, want %q", key, want)
			}

			a1, err := r1.Anchor(ctx, "shop:eu", id, time.Time{}, time.Minute)
			if err != nil {
				t.Fatalf("first anchor: %v", err)
			}
			a2, err := r2.Anchor(ctx, "shop:eu", id, time.Time{}, time.Minute)
			if err != nil || !a2.Equal(a1) {
				t.Fatalf("second replica's anchor %v, %v; want the first's %v", a2, err, a1)
			}
			// The anchor is Redis TIME in µs: not after Redis's clock now,
			// and not from another unit (seconds or ms would read as 1970).
			rt, err := c1.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if a1.After(rt) || a1.Year() < 2020 {
				t.Errorf("anchor %v, Redis TIME %v: want an anchor at or before it, in µs", a1, rt)
			}
			if ttl := c1.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
				t.Errorf("PTTL %v, want within (0, 1m]", ttl)
			}

			// Lost (Redis restarted without persistence, or failed over
			// before replication): the replica that knew it puts it back.
			if err := c1.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			restored, err := r2.Anchor(ctx, "shop:eu", id, a1, time.Minute)
			if err != nil || !restored.Equal(a1) {
				t.Fatalf("restored anchor %v, %v; want %v", restored, err, a1)
			}
			if again, err := r1.Anchor(ctx, "shop:eu", id, time.Time{}, time.Minute); err != nil || !again.Equal(a1) {
				t.Fatalf("anchor after restore %v, %v; want %v", again, err, a1)
			}

			// An Adjuster on it: until the background fetch lands the ramp
			// holds at its start; then it follows the shared anchor.
			w := &rules.Warmup{Period: time.Hour, From: 0.25, Anchor: id}
			l := &rules.Limit{Warmup: w, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1000, Period: algo.Minute}}
			adj := New(ctx, Options{Anchors: r1})
			now := a1.Add(30 * time.Minute)
			want := Scale(l.Policy, Fraction(w, 30*time.Minute)).Limit
			// A liveness bound only: the fetch is one script call on
			// loopback; 10s keeps a loaded machine from failing the test.
			deadline := time.Now().Add(10 * time.Second)
			got := adj.AdjustLimit(now, "shop:eu", nil, l, l.Policy).Limit
			for got != want && time.Now().Before(deadline) {
				if got != 250 {
					t.Fatalf("limit %d before the anchor is known, want the ramp's start 250", got)
				}
				time.Sleep(10 * time.Millisecond)
				got = adj.AdjustLimit(now, "shop:eu", nil, l, l.Policy).Limit
			}
			if got != want {
				t.Fatalf("limit %d, want %d (half way through the ramp from the shared anchor)", got, want)
			}
		})
	}
}
