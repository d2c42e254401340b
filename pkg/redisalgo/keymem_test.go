package redisalgo

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Redis memory per counter, the way BENCHMARKS.md reports it: a fresh
// redis-server is filled with n counters of one algorithm, one per user,
// and the growth of INFO used_memory is divided by n. That growth is what a
// key really costs: its name's allocation, its value, its entry in the
// keyspace and in the expiry table (each a 24-byte dictEntry in a 32-byte
// jemalloc class), and its share of both tables' bucket arrays. MEMORY
// USAGE counts only some of these.
//
// The reference is envoyproxy/ratelimit's fixed window on the same
// descriptor: INCRBY and EXPIRE of "<domain>_<key>_<value>_<window start
// s>" (its limiter/cache_key.go and redis/fixed_cache_impl.go), sent the
// same way, so the two figures compare like for like.

// memDescriptor is the descriptor every measured counter has, domain
// "perf" and entry key=user-NNNNNNN (12 bytes), per minute: the layout the
// issue measured, rls:v1:{perf:key=user-4480405:fixed_window:60000000}.
const (
	memDomain = "perf"
	memKey    = "key"
	memUser0  = 4_000_000
)

func memUser(i int) string { return "user-" + strconv.Itoa(memUser0+i) }

// memFill is how keys are written: per call, chunk counters.
const memChunk = 100

// keyMemory returns used_memory's growth per counter after n counters of
// policy p are written through a Backend (at Redis's own TIME, as in
// production) into a fresh server, and where one of them is. A fixed
// window's counters spread over n/counterFields hashes, the sizing
// docs/redis.md advises.
func keyMemory(tb testing.TB, n int, p algo.Policy) (perKey float64, sample string) {
	tb.Helper()
	return counterMemory(tb, n, Options{CounterHashes: min(max(n/counterFields, 1), MaxCounterHashes)}, func(i int) algo.Check {
		return algo.Check{Domain: memDomain, Entries: []algo.Entry{{Key: memKey, Value: memUser(i)}}, HashTag: -1, Policy: p}
	})
}

// counterFields is how many counters per hash keyMemory sizes a fixed
// window's hashes for: near docs/redis.md's advice of about 64 (the measurements used 100).
const counterFields = 100

// counterMemory returns used_memory's growth per counter after the n
// counters check(i) names get a hit each through a Backend with opts, in
// a fresh server, and where counter 0 is. It fails unless exactly n
// counters exist afterwards (a hash holding one per field), so that an
// expiry during the fill cannot go unnoticed.
func counterMemory(tb testing.TB, n int, opts Options, check func(i int) algo.Check) (perCounter float64, sample string) {
	tb.Helper()
	srv := redistest.Standalone(tb)
	client := srv.Client(tb)
	b := newBackend(tb, client, opts)
	write := func(ctx context.Context, from, to int) error {
		checks := make([]algo.Check, 0, to-from)
		for i := from; i < to; i++ {
			c := check(i)
			c.Hits = 1
			checks = append(checks, c)
		}
		d, err := b.Apply(ctx, time.Now(), checks)
		if err != nil {
			return fmt.Errorf("apply counters %d to %d: %w", from, to, err)
		}
		for i := range d {
			if !d[i].Allowed {
				return fmt.Errorf("counter %d: first hit denied", from+i)
			}
		}
		return nil
	}
	awaitFreshWindow(tb, time.Duration(check(0).Policy.Period)*time.Microsecond)
	// One counter first, so the script, its Lua state and the client's
	// buffers exist before the baseline.
	before := warmUp(tb, client, func(ctx context.Context) error { return write(ctx, n, n+1) })
	fill(tb, n, 4, write)
	keys := countCounters(tb, client, n+1, check(0).Policy.KeyedWindow())
	finishRehash(tb, client, keys)
	key, field := CounterAt("", check(0), time.Now().UnixMicro(), cmp.Or(opts.CounterHashes, DefaultCounterHashes))
	if field != "" {
		key += " " + field
	}
	return (infoSum(tb, client, "memory", "used_memory:") - before) / float64(n), key
}

// countCounters fails unless the server holds want counters, the fields
// of its hashes when inHashes (a fixed window's), else its keys, and
// returns how many keys hold them.
func countCounters(tb testing.TB, client *redis.Client, want int, inHashes bool) int {
	tb.Helper()
	keys := scanKeys(tb, client, "")
	counters := len(keys)
	if inHashes {
		ctx := context.Background()
		pipe := client.Pipeline()
		lens := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			lens[i] = pipe.HLen(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatalf("HLEN of %d hashes: %v", len(keys), err)
		}
		counters = 0
		for _, l := range lens {
			counters += int(l.Val())
		}
	}
	if counters != want {
		tb.Fatalf("server holds %d counters in %d keys, want %d (did some expire during the fill?)", counters, len(keys), want)
	}
	return len(keys)
}

// referenceMemory is keyMemory for envoyproxy/ratelimit's fixed window of
// one minute: the counter is the key's value, the window is in its name.
// With evicting, the server has an LRU eviction policy, which stops Redis
// from sharing the objects of small integers: every count then costs a
// 16-byte object, as it does on a Redis run as an evicting cache.
func referenceMemory(tb testing.TB, n int, evicting bool) (perKey float64, sample string) {
	tb.Helper()
	client := redistest.Standalone(tb).Client(tb)
	if evicting {
		for _, kv := range [][2]string{{"maxmemory", "1gb"}, {"maxmemory-policy", "allkeys-lru"}} {
			if err := client.ConfigSet(context.Background(), kv[0], kv[1]).Err(); err != nil {
				tb.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
			}
		}
	}
	awaitFreshWindow(tb, time.Minute)
	window := time.Now().Unix() / 60 * 60
	name := func(i int) string {
		return memDomain + "_" + memKey + "_" + memUser(i) + "_" + strconv.FormatInt(window, 10)
	}
	write := func(ctx context.Context, from, to int) error {
		pipe := client.Pipeline()
		for i := from; i < to; i++ {
			pipe.IncrBy(ctx, name(i), 1)
			pipe.Expire(ctx, name(i), time.Minute)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	before := warmUp(tb, client, func(ctx context.Context) error { return write(ctx, n, n+1) })
	fill(tb, n, 4, write)
	return perKeyGrowth(tb, client, n+1, before, n), name(0)
}

// awaitFreshWindow waits, when less than 30 s of the current window of
// period are left, for the next one to start: a fixed window's counters
// expire soon after the window's end, so a fill that crossed it would lose
// keys (the count then fails rather than measure). At a period of an hour
// it waits only in an hour's last 30 s.
func awaitFreshWindow(tb testing.TB, period time.Duration) {
	tb.Helper()
	now := time.Now()
	if left := now.Truncate(period).Add(period).Sub(now); left < 30*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// warmUp writes one key with write and returns used_memory after it.
func warmUp(tb testing.TB, client *redis.Client, write func(context.Context) error) float64 {
	tb.Helper()
	if err := write(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return infoSum(tb, client, "memory", "used_memory:")
}

// fill calls write for [0, n) in chunks of memChunk from workers
// goroutines, bounded by n and by a generous deadline (a hang fails, it does
// not measure). Each worker may open a connection, whose buffers count in
// used_memory: a few kilobytes, nothing over 100 000 keys, but a byte per
// key over a few thousand, where one worker keeps the count fixed.
func fill(tb testing.TB, n, workers int, write func(ctx context.Context, from, to int) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		from  int
		first error
	)
	// claim returns the next chunk, or ok false when all are taken or a
	// writer failed.
	claim := func() (lo, hi int, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || from >= n {
			return 0, 0, false
		}
		lo, from = from, min(from+memChunk, n)
		return lo, from, true
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo, hi, ok := claim(); ok; lo, hi, ok = claim() {
				if err := write(ctx, lo, hi); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		tb.Fatalf("fill %d keys: %v", n, first)
	}
}

// perKeyGrowth checks that the server holds keys keys and returns the
// growth of used_memory since before divided by n.
func perKeyGrowth(tb testing.TB, client *redis.Client, keys int, before float64, n int) float64 {
	tb.Helper()
	got, err := client.DBSize(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if got != int64(keys) {
		tb.Fatalf("server holds %d keys, want %d (did some expire during the fill?)", got, keys)
	}
	finishRehash(tb, client, keys)
	return (infoSum(tb, client, "memory", "used_memory:") - before) / float64(n)
}

// finishRehash ends any incremental rehash of the key and expiry tables
// before memory is read. A table that grew during the fill (at 16 384 keys,
// say) keeps its old bucket array until enough operations or server cron
// runs have moved every bucket; read before that, used_memory carries the
// old array too (128 KiB at 16 384 buckets, 6.5 bytes/key over 20 000
// keys), and on a busy machine the cron may not have run yet. Each
// RANDOMKEY moves buckets of both tables (the random pick, then the expiry
// lookup), so one per key is more than enough.
func finishRehash(tb testing.TB, client *redis.Client, keys int) {
	tb.Helper()
	ctx := context.Background()
	for done := 0; done < keys; done += memChunk {
		pipe := client.Pipeline()
		for range min(memChunk, keys-done) {
			pipe.RandomKey(ctx)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatalf("RANDOMKEY to finish rehashing: %v", err)
		}
	}
}

// keyMemoryPolicies are the measured counters: every algorithm at 1 per
// minute, so that one hit keeps every key alive for the whole minute (a
// token bucket's key lives until it is full again).
func keyMemoryPolicies() []algo.Policy {
	var ps []algo.Policy
	for _, a := range algo.Algorithms {
		ps = append(ps, algo.Policy{Algorithm: a, Limit: 1, Period: algo.Minute})
	}
	return ps
}

// TestCounterMemory holds the fixed window's layout to the issue's
// budget: for typical descriptors, a counter in its window's hash costs
// Redis at most 0.6× the memory of envoyproxy/ratelimit's key for the same
// descriptor and window, measured the same way (used_memory's growth), with
// the hashes sized as docs/redis.md advises, hash-tagged or not.
func TestCounterMemory(t *testing.T) {
	// Enough counters that a connection buffer sized by the machine's
	// load moves the figure by far less than the margins compared.
	const n = 20000
	window := strconv.FormatInt(time.Now().Unix()/60*60, 10)
	// An hour: awaitFreshWindow almost never waits.
	perHour := algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Hour}
	for _, tc := range []struct {
		name    string
		domain  string
		entries func(i int) []algo.Entry
		hashTag int
	}{
		{"issue's descriptor", memDomain, func(i int) []algo.Entry { return []algo.Entry{{Key: memKey, Value: memUser(i)}} }, -1},
		{"address and path", "shop", func(i int) []algo.Entry {
			return []algo.Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250)}, {Key: "path", Value: "/v1/orders"}}
		}, -1},
		{"hash tag on the user", "api", func(i int) []algo.Entry {
			return []algo.Entry{{Key: "user_id", Value: memUser(i)}, {Key: "path", Value: "/v1/orders"}}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(i int) algo.Check {
				return algo.Check{Domain: tc.domain, Entries: tc.entries(i), HashTag: tc.hashTag, Policy: perHour}
			}
			got, sample := counterMemory(t, n, Options{CounterHashes: n / counterFields}, check)
			reference := func(i int) string {
				name := tc.domain + "_"
				for _, e := range tc.entries(i) {
					name += e.Key + "_" + e.Value + "_"
				}
				return name + window
			}
			want := nameMemory(t, n, reference)
			t.Logf("%q: %.1f bytes/counter; reference %q: %.1f bytes/key (%.2f×)", sample, got, reference(0), want, got/want)
			if got > 0.6*want {
				t.Errorf("%q costs %.1f bytes/counter, more than 0.6× the reference's %q at %.1f", sample, got, reference(0), want)
			}
		})
	}
}

// nameMemory returns used_memory's growth per key after n keys named
// name(i) are set, each to 1 for a minute, in a fresh server, as
// envoyproxy/ratelimit writes them.
func nameMemory(tb testing.TB, n int, name func(i int) string) float64 {
	tb.Helper()
	client := redistest.Standalone(tb).Client(tb)
	write := func(ctx context.Context, from, to int) error {
		pipe := client.Pipeline()
		for i := from; i < to; i++ {
			pipe.Set(ctx, name(i), 1, time.Minute)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	before := warmUp(tb, client, func(ctx context.Context) error { return write(ctx, n, n+1) })
	fill(tb, n, 1, write)
	return perKeyGrowth(tb, client, n+1, before, n)
}

// BenchmarkKeyMemory produces BENCHMARKS.md's table of Redis memory per
// counter: 100 000 counters per algorithm and for the reference, each on a
// fresh server, reported as bytes/key. It ignores b.N (one fill is the
// measurement); run it with -benchtime=1x.
func BenchmarkKeyMemory(b *testing.B) {
	const n = 100_000
	for _, evicting := range []bool{false, true} {
		name := "reference_fixed_window"
		if evicting {
			name += "_allkeys-lru"
		}
		b.Run(name, func(b *testing.B) {
			per, key := referenceMemory(b, n, evicting)
			b.ReportMetric(per, "bytes/key")
			b.Logf("%q (%d bytes): %.1f bytes/key", key, len(key), per)
		})
	}
	for _, p := range keyMemoryPolicies() {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			per, key := keyMemory(b, n, p)
			b.ReportMetric(per, "bytes/key")
			b.Logf("%q (%d bytes): %.1f bytes/key", key, len(key), per)
		})
	}
	// A fixed window's counters in fewer, larger hashes: within Redis's
	// default listpack bound (512 fields), and beyond it (hashtables).
	for _, hashes := range []int{256, 16} {
		b.Run(fmt.Sprintf("fixed_window_%d_hashes", hashes), func(b *testing.B) {
			per, key := counterMemory(b, n, Options{CounterHashes: hashes}, func(i int) algo.Check {
				return algo.Check{Domain: memDomain, Entries: []algo.Entry{{Key: memKey, Value: memUser(i)}}, HashTag: -1, Policy: keyMemoryPolicies()[0]}
			})
			b.ReportMetric(per, "bytes/key")
			b.Logf("%q, %d counters in %d hashes: %.1f bytes/counter", key, n, hashes, per)
		})
	}
}
