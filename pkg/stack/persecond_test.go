package stack

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// perSecondStack returns a stack on two fresh Redis servers, the main one
// and the per-second one, with their clients.
func perSecondStack(t *testing.T) (s *Stack, main, sec *redis.Client) {
	t.Helper()
	main, sec = redistest.Standalone(t).Client(t), redistest.Standalone(t).Client(t)
	s = newStack(t, Config{
		Redis:          &redisclient.Client{Single: main},
		PerSecondRedis: &redisclient.Client{Single: sec},
		Timeout:        10 * time.Second, DenyCacheEntries: 1000, CallerTime: true,
	})
	return s, main, sec
}

func perSecondPolicy(a algo.Algorithm, n int64) algo.Policy {
	return algo.Policy{Algorithm: a, Limit: n, Period: algo.Second}
}

// TestPerSecondRouting: limits of a second or less live on the per-second
// Redis only, longer ones on the main Redis only.
func TestPerSecondRouting(t *testing.T) {
	s, main, sec := perSecondStack(t)
	now := time.Now().UnixMicro()
	backendtest.Apply(t, s, now, backendtest.UserCheck("d", "u", perSecondPolicy(algo.FixedWindow, 5), 1))
	if m, p := redistest.DBSize(t, main), redistest.DBSize(t, sec); m != 0 || p != 1 {
		t.Fatalf("after a per-second check: main holds %d keys, per-second %d; want 0 and 1", m, p)
	}
	backendtest.Apply(t, s, now,
		backendtest.UserCheck("d", "v", backendtest.PerMinute(algo.FixedWindow, 5), 1),
		backendtest.UserCheck("d", "v", perSecondPolicy(algo.TokenBucket, 5), 1))
	if m, p := redistest.DBSize(t, main), redistest.DBSize(t, sec); m != 1 || p != 2 {
		t.Fatalf("after a mixed request: main holds %d keys, per-second %d; want 1 and 2", m, p)
	}
}

// TestPerSecondAllOrNothing: when one Redis denies, what the other
// consumed is given back, whichever side denies, and the decisions keep
// request order.
func TestPerSecondAllOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name           string
		second, minute int64 // limits; the one of 1 denies the second request
	}{
		{"per-second denies", 1, 5},
		{"main denies", 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := perSecondStack(t)
			now := time.Now().UnixMicro()
			minute := backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.FixedWindow, tc.minute), 1)
			second := backendtest.UserCheck("d", "u", perSecondPolicy(algo.FixedWindow, tc.second), 1)
			d := backendtest.Apply(t, s, now, minute, second)
			if !d[0].Allowed || !d[1].Allowed || d[0].Remaining != tc.minute-1 || d[1].Remaining != tc.second-1 {
				t.Fatalf("first request: %+v, want both allowed with %d and %d left", d, tc.minute-1, tc.second-1)
			}
			d = backendtest.Apply(t, s, now, minute, second)
			if d[0].Allowed && d[1].Allowed {
				t.Fatalf("second request: %+v, want one side denied", d)
			}
			// The denied request consumed nothing on either Redis.
			probeMinute, probeSecond := minute, second
			probeMinute.Hits, probeSecond.Hits = 0, 0
			p := backendtest.Apply(t, s, now, probeMinute, probeSecond)
			if p[0].Remaining != tc.minute-1 || p[1].Remaining != tc.second-1 {
				t.Errorf("after the denied request: minute %d left, second %d left; want %d and %d",
					p[0].Remaining, p[1].Remaining, tc.minute-1, tc.second-1)
			}
		})
	}
}

// TestPerSecondPeek: a peek reads each counter from the Redis that holds
// it, in request order, and writes to neither.
func TestPerSecondPeek(t *testing.T) {
	s, main, sec := perSecondStack(t)
	now := time.Now().UnixMicro()
	minute := backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.FixedWindow, 5), 2)
	second := backendtest.UserCheck("d", "u", perSecondPolicy(algo.FixedWindow, 5), 2)
	unused := backendtest.UserCheck("d", "w", perSecondPolicy(algo.TokenBucket, 5), 2)
	backendtest.Apply(t, s, now, minute, second)
	got, err := s.Peek(context.Background(), time.UnixMicro(now), []algo.Check{second, unused, minute})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []algo.Check{second, unused, minute} {
		want := int64(3)
		if i == 1 {
			want = 5
		}
		if r := got[i].Decision(c.Policy).Remaining; r != want || got[i].Exists != (i != 1) {
			t.Errorf("peek %d: %+v (remaining %d), want remaining %d", i, got[i], r, want)
		}
	}
	if m, p := redistest.DBSize(t, main), redistest.DBSize(t, sec); m != 1 || p != 1 {
		t.Fatalf("after the peek: main holds %d keys, per-second %d; want 1 and 1", m, p)
	}
}

// TestPerSecondRefundAcrossWindowEdge: when the main Redis answers late
// (CLIENT PAUSE), after the per-second window of the request ended and
// more than the clock's skew after the request's now, the per-second
// side's refund still goes to the window its hit went to (issue 39): that
// window keeps 0 hits of the denied request, and the next window, full,
// gives back nothing it never had, so no hit is admitted twice. The
// per-second Redis is standalone or a Cluster.
func TestPerSecondRefundAcrossWindowEdge(t *testing.T) {
	for _, tc := range []struct {
		name string
		// sec returns the per-second Redis's client for the stack and
		// for the test, and the key prefix to use on it.
		sec func(t *testing.T) (*redisclient.Client, redis.UniversalClient, string)
	}{
		{"standalone", func(t *testing.T) (*redisclient.Client, redis.UniversalClient, string) {
			c := redistest.Standalone(t).Client(t)
			return &redisclient.Client{Single: c}, c, ""
		}},
		{"cluster", func(t *testing.T) (*redisclient.Client, redis.UniversalClient, string) {
			c := redistest.SharedCluster(t).ClusterClient(t)
			return &redisclient.Client{Cluster: c}, c, redistest.KeyPrefix(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secClient, sec, prefix := tc.sec(t)
			refundAcrossWindowEdge(t, secClient, sec, prefix)
		})
	}
}

// refundAcrossWindowEdge is TestPerSecondRefundAcrossWindowEdge on a
// per-second Redis reached through secClient (sec for the test's reads)
// and key prefix prefix.
func refundAcrossWindowEdge(t *testing.T, secClient *redisclient.Client, sec redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	main := redistest.Standalone(t).Client(t)
	s := newStack(t, Config{
		Redis:          &redisclient.Client{Single: main},
		PerSecondRedis: secClient,
		KeyPrefix:      prefix,
		// Above the pause, so the main side answers (denies) late
		// instead of failing.
		Timeout: 5 * time.Second,
	})
	const limit = 5
	minute := backendtest.UserCheck("d", "u", backendtest.PerMinute(algo.FixedWindow, 1), 1)
	second := backendtest.UserCheck("d", "u", perSecondPolicy(algo.FixedWindow, limit), 1)
	// Fill the minute, so that the main side denies, and have both
	// sides' clocks measured.
	if d := backendtest.Apply(t, s, time.Now().UnixMicro(), minute); !d[0].Allowed {
		t.Fatalf("filling the minute: %+v", d)
	}
	probe := second
	probe.Hits = 0
	backendtest.Apply(t, s, time.Now().UnixMicro(), probe)

	// The per-second hash's master's clock: the one its window is
	// placed on.
	hashAt := func(now int64) (hash, field string) {
		return redisalgo.CounterAt(prefix, second, now, redisalgo.DefaultCounterHashes)
	}
	timeOf := func() time.Time {
		t.Helper()
		h, _ := hashAt(0)
		if cc, ok := sec.(*redis.ClusterClient); ok {
			m, err := cc.MasterForKey(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			return m.Time(ctx).Val()
		}
		return sec.Time(ctx).Val()
	}
	// Start the request 700 to 800 ms into a second of that clock: its
	// hit lands in that window, the refund is sent after the pause, over
	// 250 ms (the clock's largest skew) later and in the next window.
	const pause = 600 * time.Millisecond
	var redisNow time.Time
	for {
		if redisNow = timeOf(); redisNow.IsZero() {
			t.Fatal("TIME failed")
		}
		if f := redisNow.UnixMicro() % algo.Second; f >= 700_000 && f < 800_000 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	window := redisNow.UnixMicro() / algo.Second * algo.Second
	hash, field := hashAt(window)
	nextHash, nextField := hashAt(window + algo.Second)
	// The next window is full already: a refund landing there would admit
	// one hit more than its limit.
	if err := sec.HSet(ctx, nextHash, nextField, limit).Err(); err != nil {
		t.Fatal(err)
	}
	if err := main.Do(ctx, "client", "pause", pause.Milliseconds(), "all").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := s.Apply(ctx, time.Now(), []algo.Check{minute, second})
	if err != nil {
		t.Fatal(err)
	}
	if d[0].Allowed {
		t.Fatalf("the request was admitted on the full minute: %+v", d)
	}
	got := func(hash, field string) int64 {
		t.Helper()
		n, err := sec.HGet(ctx, hash, field).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return n
	}
	if n := got(hash, field); n != 0 {
		t.Errorf("the denied request's window holds %d hits, want 0: its refund went elsewhere", n)
	}
	if n := got(nextHash, nextField); n != limit {
		t.Errorf("the next window holds %d hits, want its %d: the refund gave back %d hits it never had, admitted twice", n, limit, limit-n)
	}
}
