package redisalgo

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// holdGiveBacks makes every pipeline of b that carries a give-back wait
// until release is called (also at cleanup); held is closed when the
// first one waits. Install it before b sends anything.
func holdGiveBacks(t *testing.T, b *Backend) (held <-chan struct{}, release func()) {
	t.Helper()
	entered, open := make(chan struct{}), make(chan struct{})
	var enterOnce, openOnce sync.Once
	release = func() { openOnce.Do(func() { close(open) }) }
	t.Cleanup(release)
	wrap := func(bt *batcher) {
		send := bt.send
		bt.send = func(ctx context.Context, calls []*scriptCall) {
			for _, c := range calls {
				if c.giveBack {
					enterOnce.Do(func() { close(entered) })
					<-open
					break
				}
			}
			send(ctx, calls)
		}
	}
	// Batching is on: give-backs go through the request batchers.
	wrapBatchers(b, wrap)
	return entered, release
}

// countTrips counts the round trips b's requests wait for: the pipelines
// its batchers send that carry a request's own calls, not only
// give-backs. Batching must be on, and the requests one at a time (each
// pipeline then carries one request's calls). Install it before b sends
// anything.
func countTrips(b *Backend) *atomic.Int64 {
	var n atomic.Int64
	wrapBatchers(b, func(bt *batcher) {
		send := bt.send
		bt.send = func(ctx context.Context, calls []*scriptCall) {
			if slices.ContainsFunc(calls, func(c *scriptCall) bool { return !c.giveBack }) {
				n.Add(1)
			}
			send(ctx, calls)
		}
	})
	return &n
}

// TestGiveBackRaces: a denied plain hit's give-back that lands after its
// key expired, was evicted, or was refunded by the script (to a lower
// count, or to nothing) never makes a negative count nor a key without a
// TTL, and the window then admits exactly what its admitted hits leave:
// never remaining > limit. The denied request is answered while its
// give-back is held back, after one round trip: the give-back is not on
// its path.
func TestGiveBackRaces(t *testing.T) {
	type race struct {
		name string
		// gone: the race removes the window's hash behind the
		// replica's back (giveBackRace's evicts).
		gone bool
		// do races the held give-back; it returns the hits the window
		// holds afterwards, as the scripts read them.
		do func(t *testing.T, ctx context.Context, b *Backend, client redis.UniversalClient, key, field string, c algo.Check) int64
	}
	const limit = 3
	races := []race{
		{"expiry", true, func(t *testing.T, ctx context.Context, _ *Backend, client redis.UniversalClient, key, _ string, _ algo.Check) int64 {
			if err := client.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.Holds(t, "the key expired", func() bool { return client.Exists(ctx, key).Val() == 0 })
			return 0
		}},
		{"refund one", false, func(t *testing.T, ctx context.Context, b *Backend, _ redis.UniversalClient, _, _ string, c algo.Check) int64 {
			c.Refund = true
			if _, err := b.Apply(ctx, t0, []algo.Check{c}); err != nil {
				t.Fatal(err)
			}
			return limit - 1
		}},
		{"refund all", false, func(t *testing.T, ctx context.Context, b *Backend, _ redis.UniversalClient, _, _ string, c algo.Check) int64 {
			c.Refund, c.Hits = true, 2*limit
			if _, err := b.Apply(ctx, t0, []algo.Check{c}); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
	}
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		for _, r := range races {
			t.Run(r.name, func(t *testing.T) {
				giveBackRace(t, client, limit, r.gone, r.do)
			})
		}
	})
	t.Run("eviction", func(t *testing.T) {
		srv := redistest.Standalone(t)
		client := srv.Client(t)
		giveBackRace(t, client, limit, true, func(t *testing.T, ctx context.Context, _ *Backend, _ redis.UniversalClient, key, _ string, _ algo.Check) int64 {
			evict(t, ctx, client, key, "volatile-ttl")
			return 0
		})
	})
}

// giveBackRace fills a window to limit, has one more hit denied with its
// give-back held, runs race, lets the give-back land, and checks the key
// and what the window admits next. evicts says that race deletes the
// hash behind the replica's back: the hits after it recreate the hash
// without an expiry, which the replica's resent PEXPIRE … NX restores
// on its first call resendExpiry after its last (expire.go).
func giveBackRace(t *testing.T, client redis.UniversalClient, limit int64, evicts bool, race func(t *testing.T, ctx context.Context, b *Backend, client redis.UniversalClient, key, field string, c algo.Check) int64) {
	t.Helper()
	ctx := context.Background()
	b := newBackend(t, client, Options{CallerTime: true})
	held, release := holdGiveBacks(t, b)
	trips := countTrips(b)
	c := algo.Check{Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: limit, Period: algo.Hour}, Hits: 1}
	if !plainCheck(&c) {
		t.Fatal("the check is no plain call")
	}
	key, field := counter(c, t0.UnixMicro())
	for i := range limit {
		if d, err := b.Apply(ctx, t0, []algo.Check{c}); err != nil || !d[0].Allowed {
			t.Fatalf("hit %d: %+v, %v", i, d, err)
		}
	}
	before := trips.Load()
	d, err := b.Apply(ctx, t0, []algo.Check{c})
	if err != nil || d[0].Allowed {
		t.Fatalf("the hit over the limit: %+v, %v", d, err)
	}
	if n := trips.Load() - before; n != 1 {
		t.Fatalf("the denied request waited for %d round trips, want 1", n)
	}
	<-held // the give-back is posted, and the request was answered before it
	if v := client.HGet(ctx, key, field).Val(); v != strconv.FormatInt(limit+1, 10) {
		t.Fatalf("before the give-back %s %s holds %q, want %d", key, field, v, limit+1)
	}
	// Another replica races: this one's batcher holds the give-back,
	// and its requests would queue behind it.
	left := race(t, ctx, newBackend(t, client, Options{CallerTime: true}), client, key, field, c)
	release()
	b.giveBacks.Wait()

	checkCountKey(t, ctx, client, key, field, left, true)
	admitted := int64(0)
	for i := range limit + 2 {
		d, err := b.Apply(ctx, t0, []algo.Check{c})
		if err != nil {
			t.Fatalf("hit %d after the race: %v", i, err)
		}
		if d[0].Remaining > limit {
			t.Fatalf("hit %d after the race: remaining %d > limit %d", i, d[0].Remaining, limit)
		}
		if d[0].Allowed {
			admitted++
		}
		b.giveBacks.Wait()
		checkCountKey(t, ctx, client, key, field, -1, !evicts)
	}
	if admitted != limit-left {
		t.Fatalf("after the race the window admitted %d hits, want %d (limit %d, %d held)", admitted, limit-left, limit, left)
	}
	if evicts {
		// One call a resendExpiry later resends the expiry.
		for i := range 2 {
			if _, err := b.Apply(ctx, t0.Add(time.Duration(i)*time.Duration(resendExpiry)*time.Microsecond), []algo.Check{c}); err != nil {
				t.Fatalf("hit %d after the eviction: %v", i, err)
			}
		}
		b.giveBacks.Wait()
		checkCountKey(t, ctx, client, key, field, limit, true)
	}
}

// checkCountKey fails unless field of hash key is missing or holds a
// count ≥ 0, in a hash with a TTL when needTTL; and, when want ≥ 0, unless
// it holds want (missing for 0).
func checkCountKey(t *testing.T, ctx context.Context, client redis.UniversalClient, key, field string, want int64, needTTL bool) {
	t.Helper()
	v, err := client.HGet(ctx, key, field).Result()
	if err == redis.Nil {
		if want > 0 {
			t.Fatalf("%s %s is missing, want %d", key, field, want)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("%s holds %q: want a count ≥ 0", key, v)
	}
	if want >= 0 && n != want {
		t.Fatalf("%s holds %d, want %d", key, n, want)
	}
	if ttl := client.PTTL(ctx, key).Val(); needTTL && ttl <= 0 {
		t.Fatalf("%s has no TTL (PTTL %v)", key, ttl)
	}
}

// evict has Redis evict key under maxmemory with policy, volatile-ttl or
// allkeys-lru: filler keys (with a longer TTL than key's under
// volatile-ttl, without one under allkeys-lru, where key is the least
// recently used, since EXISTS does not touch a key's LRU clock) push
// memory over the bound until key goes. The bound is lifted again after.
func evict(t *testing.T, ctx context.Context, client *redis.Client, key, policy string) {
	t.Helper()
	info := client.InfoMap(ctx, "memory").Val()["Memory"]
	mem, err := strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		t.Fatalf("INFO memory: used_memory %q", info["used_memory"])
	}
	for _, kv := range [][2]string{{"maxmemory-policy", policy}, {"maxmemory-samples", "10"}, {"maxmemory", strconv.FormatInt(mem+256<<10, 10)}} {
		if err := client.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
		}
	}
	t.Cleanup(func() { client.ConfigSet(context.Background(), "maxmemory", "0") })
	var ttl time.Duration
	if policy == "volatile-ttl" {
		ttl = 24 * time.Hour
	}
	filler := make([]byte, 1024)
	evicted := false
	for i := 0; i < 16384 && !evicted; i++ {
		// A write may fail with OOM once nothing evictable is left; the
		// key is gone by then.
		_ = client.Set(ctx, fmt.Sprintf("%s:filler:%d", key, i), filler, ttl).Err()
		evicted = client.Exists(ctx, key).Val() == 0
	}
	if err := client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !evicted {
		t.Fatalf("%s was not evicted", key)
	}
	if n := client.InfoMap(ctx, "stats").Val()["Stats"]["evicted_keys"]; n == "" || n == "0" {
		t.Fatalf("%s is gone but Redis evicted no key (evicted_keys %q)", key, n)
	}
}

// TestPlainReadsNonPositiveCount: a count at or below 0 (none of ours
// writes one; an older release's give-back could) reads as no hits, as
// the scripts read it: the hit is admitted with limit-1 remaining and the
// window holds 1, with a TTL.
func TestPlainReadsNonPositiveCount(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, client, Options{CallerTime: true})
		trips := countTrips(b)
		c := algo.Check{Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 3, Period: algo.Hour}, Hits: 1}
		key, field := counter(c, t0.UnixMicro())
		if err := client.HSet(ctx, key, field, "-5").Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.PExpire(ctx, key, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int64{2, 1, 0} {
			d, err := b.Apply(ctx, t0, []algo.Check{c})
			if err != nil || !d[0].Allowed || d[0].Remaining != want {
				t.Fatalf("hit %d: %+v, %v; want allowed with %d remaining", i, d, err, want)
			}
			checkCountKey(t, ctx, client, key, field, int64(i+1), true)
		}
		if d, err := b.Apply(ctx, t0, []algo.Check{c}); err != nil || d[0].Allowed {
			t.Fatalf("the hit over the limit: %+v, %v", d, err)
		}
		// The first hit found -5 and went again through lean.lua; the
		// others took one round trip each.
		if n := trips.Load(); n != 5 {
			t.Errorf("%d round trips for 4 requests, want 5", n)
		}
	})
}
