package warmup

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestRedisAnchors: on standalone Redis, Cluster and Sentinel, replicas
// (separate clients) asking for one ramp's anchor leave one value, set once
// from Redis TIME, with the anchor key layout and a TTL; each reads it on
// its own clock, however far that clock is off; an anchor Redis lost is
// restored from what a replica knew, not set anew; and an Adjuster on it
// ramps from that anchor.
//
// The test's clock and Redis's are the host's, so a replica with an
// unshifted clock must read the stored value itself, up to the half round
// trip its estimate of the skew may err by: the bounds below are that
// arithmetic on measured round trips, not a guess at how fast things run.
func TestRedisAnchors(t *testing.T) {
	sets := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.SharedStandalone(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).ClusterClient(t) }},
		{"sentinel", func(t *testing.T) redis.UniversalClient { return redistest.SharedSentinel(t).FailoverClient(t) }},
	}
	const id, domain = "00112233445566778899aabbccddeeff", "shop:eu"
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			ctx := context.Background()
			c := set.client(t)
			prefix := redistest.KeyPrefix(t)
			// Three replicas: two with the host's clock, one an hour behind.
			r1, r2, late := NewRedisAnchors(c, prefix), NewRedisAnchors(set.client(t), prefix), NewRedisAnchors(set.client(t), prefix)
			late.now = func() time.Time { return time.Now().Add(-time.Hour) }
			key := r1.Key(domain, id)
			if want := prefix + "r2w{shop%3Aeu:" + id + "}"; key != want {
				t.Fatalf("key %q, want %q", key, want)
			}
			stored := func() time.Time {
				t.Helper()
				us, err := strconv.ParseInt(c.Get(ctx, key).Val(), 10, 64)
				if err != nil {
					t.Fatalf("anchor key %s: %v", key, err)
				}
				return time.UnixMicro(us)
			}
			// ask returns r's anchor, checked to be stored+shift within
			// half the call's round trip, and that bound.
			ask := func(r *RedisAnchors, known time.Time, shift time.Duration) (time.Time, time.Duration) {
				t.Helper()
				sent := time.Now()
				a, err := r.Anchor(ctx, domain, id, known, time.Minute)
				rtt := time.Since(sent)
				if err != nil {
					t.Fatalf("Anchor: %v", err)
				}
				bound := rtt/2 + time.Microsecond
				if d := a.Sub(stored().Add(shift)).Abs(); d > bound {
					t.Fatalf("anchor %v is %v off the stored one shifted by %v; want within half the round trip %v", a, d, shift, rtt)
				}
				return a, bound
			}

			before, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			a1, err1 := ask(r1, time.Time{}, 0)
			first := stored()
			ask(r2, time.Time{}, 0)
			_, errLate := ask(late, time.Time{}, -time.Hour)
			if !stored().Equal(first) {
				t.Fatalf("the anchor moved from %v to %v: want it set once", first, stored())
			}
			if after := c.Time(ctx).Val(); first.Before(before.Truncate(time.Microsecond)) || first.After(after) {
				t.Errorf("anchor %v, want Redis TIME between %v and %v", first, before, after)
			}
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
				t.Errorf("PTTL %v, want within (0, 1m]", ttl)
			}

			// Lost (Redis restarted without persistence, or failed over
			// before replication): a replica that knew it puts it back, on
			// Redis's clock although its own is an hour behind. What it
			// knew errs by r1's bound, its skew by its last call's.
			if err := c.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := late.Anchor(ctx, domain, id, a1.Add(-time.Hour), time.Minute); err != nil {
				t.Fatal(err)
			}
			if d := stored().Sub(first).Abs(); d > err1+errLate {
				t.Errorf("restored anchor %v is %v off the lost %v, want within %v", stored(), d, first, err1+errLate)
			}
			first = stored()

			// An Adjuster on it: until the background fetch lands the ramp
			// holds at its start; then it follows the shared anchor.
			w := &rules.Warmup{Period: time.Hour, From: 0.25, Anchor: id}
			l := &rules.Limit{Warmup: w, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1000, Period: algo.Minute}}
			adj := New(Options{Anchors: r1})
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- adj.Run(runCtx) }()
			defer func() { stop(); <-done }()
			// 30m1s into an hour's ramp of 1000 from 250: 625.2, which the
			// skew estimate's microseconds cannot move past a whole request.
			now := first.Add(30*time.Minute + time.Second)
			want := int64(625)
			// A liveness bound only: the fetch is one script call on
			// loopback; 10s keeps a loaded machine from failing the test.
			deadline := time.Now().Add(10 * time.Second)
			got := adj.AdjustLimit(now, domain, nil, l, l.Policy).Limit
			for got == 250 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				got = adj.AdjustLimit(now, domain, nil, l, l.Policy).Limit
			}
			if got != want {
				t.Fatalf("limit %d, want %d (half way through the ramp from the shared anchor)", got, want)
			}
		})
	}
}
