package redisalgo

// Tests of issue 33's layout "r3" (key.go, plain.go, expire.go) against
// real redis-servers: what a plain decision costs Redis in commands, that
// replicas racing on one counter never over-admit, what an evicted window
// hash does, and that r2 and r3 replicas count apart during a rolling
// upgrade.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// hourly is the policy of the layout tests: a fixed window of an hour, so
// that a run falls in one window (the tests that use Redis's clock check
// that it did).
func hourly(limit int64) algo.Policy {
	return algo.Policy{Algorithm: algo.FixedWindow, Limit: limit, Period: algo.Hour}
}

// userCheck is a plain-call candidate: one fixed-window limit on (user,
// user) of domain, of hits.
func userCheck(domain, user string, limit, hits int64) algo.Check {
	return backendtest.UserCheck(domain, user, hourly(limit), hits)
}

// cmdStat is one command's INFO commandstats line: its calls, and the µs
// they took to execute.
type cmdStat struct {
	calls int64
	usec  float64
}

// commandStats returns INFO commandstats per command name (lower case,
// without "cmdstat_").
func commandStats(tb testing.TB, ctx context.Context, client *redis.Client) map[string]cmdStat {
	tb.Helper()
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	stats := make(map[string]cmdStat)
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st cmdStat
		for kv := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				tb.Fatalf("INFO commandstats: %s has %s %q", name, k, v)
			}
		}
		stats[name] = st
	}
	return stats
}

// domainHashes returns the counter hashes (untagged, no key prefix) of
// domain among client's keys.
func domainHashes(t *testing.T, ctx context.Context, client redis.UniversalClient, domain string) []string {
	t.Helper()
	start := LayoutVersion + "{" + string(appendPart(nil, domain)) + ":"
	var out []string
	for _, k := range scanKeys(t, client, "") {
		if strings.HasPrefix(k, start) && IsCounterHash(k, "") {
			out = append(out, k)
		}
	}
	return out
}

// hashCounts reads every field of hash as a count, failing on a count
// that is not an integer ≥ 0: no path of ours may write one.
func hashCounts(t *testing.T, ctx context.Context, client redis.UniversalClient, hash string) map[string]int64 {
	t.Helper()
	m, err := client.HGetAll(ctx, hash).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", hash, err)
	}
	counts := make(map[string]int64, len(m))
	for f, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			t.Fatalf("%s field %s holds %q: want a count ≥ 0", hash, f, v)
		}
		counts[f] = n
	}
	return counts
}

// expiriesBound is the most PEXPIREs replicas replicas may send to a hash
// that got calls plain calls in one window over a run of elapsed: each
// replica sends one on its first call and at most one every resendExpiry
// after (expiries.need), so at most 1+⌊elapsed/resendExpiry⌋ each, and
// never more than the calls.
func expiriesBound(calls, replicas int64, elapsed time.Duration) int64 {
	return min(calls, min(replicas, calls)*(1+elapsed.Microseconds()/resendExpiry))
}

// TestOneCommandPerDecision: a plain decision (one fixed-window limit, one
// hit, admitted) is one HINCRBY; its hash's PEXPIRE … NX goes once per
// hash and window per replica, plus at most one every resendExpiry
// (expire.go), and every hash gets its expiry. Measured with INFO
// commandstats on a fresh redis-server, with the production Options
// (windows on the backend's tracked clock).
func TestOneCommandPerDecision(t *testing.T) {
	const workers = 4
	for _, tc := range []struct {
		name      string
		replicas  int
		decisions int
		// check is decision i's: its domain's suffix and user.
		check func(i int) (domain, user string)
	}{
		{"one replica", 1, 2000, func(i int) (string, string) { return "", fmt.Sprintf("u%d", i%200) }},
		{"four replicas", 4, 2000, func(i int) (string, string) { return "", fmt.Sprintf("u%d", i%200) }},
		// Many hashes of few calls each, each hash's calls in a row:
		// every hash must get its one PEXPIRE, whatever became of the
		// request buffers its name was built in.
		{"many hashes of two calls", 1, 4000, func(i int) (string, string) { return strconv.Itoa(i / 2), "u" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			srv := redistest.Standalone(t)
			admin := srv.Client(t)
			var backends []*Backend
			for range tc.replicas {
				backends = append(backends, newBackend(t, srv.Client(t), Options{}))
			}
			// The scripts were loaded by New; count from here.
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatalf("CONFIG RESETSTAT: %v", err)
			}
			domain := redistest.KeyPrefix(t)
			var next atomic.Int64
			start := time.Now()
			errs := make(chan error, workers)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= tc.decisions {
							return
						}
						suffix, user := tc.check(i)
						c := userCheck(domain+suffix, user, 1_000_000, 1)
						d, err := backends[i%len(backends)].Apply(ctx, time.Now(), []algo.Check{c})
						if err != nil || !d[0].Allowed {
							errs <- fmt.Errorf("decision %d: %+v, %v; want admitted", i, d, err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for _, b := range backends {
				b.giveBacks.Wait()
			}
			stats := commandStats(t, ctx, admin)

			// Every key of the fresh server is a counter hash of the
			// run; its fields sum to the plain calls it got, since
			// every call was admitted and nothing was given back.
			keys := scanKeys(t, admin, "")
			var total, bound int64
			noTTL := 0
			for _, h := range keys {
				if !IsCounterHash(h, "") {
					t.Fatalf("%q on the fresh server is no counter hash", h)
				}
				calls := int64(0)
				for _, n := range hashCounts(t, ctx, admin, h) {
					calls += n
				}
				total += calls
				bound += expiriesBound(calls, int64(tc.replicas), elapsed)
				if ttl := admin.PTTL(ctx, h).Val(); ttl <= 0 {
					if noTTL < 3 {
						t.Errorf("%s (%d calls) has no TTL (PTTL %v)", h, calls, ttl)
					}
					noTTL++
				}
			}
			if noTTL > 0 {
				t.Errorf("%d of %d hashes have no TTL: they never expire", noTTL, len(keys))
			}
			if total != int64(tc.decisions) {
				t.Fatalf("the hashes count %d hits, want %d", total, tc.decisions)
			}
			if stats["hincrby"].calls != int64(tc.decisions) {
				t.Errorf("HINCRBY calls %d, want one per decision, %d", stats["hincrby"].calls, tc.decisions)
			}
			if p := stats["pexpire"].calls; p < int64(len(keys)) || p > bound {
				t.Errorf("PEXPIRE calls %d, want between %d (one per hash) and %d (one per replica, hash and window, and at most one every %d µs)", p, len(keys), bound, resendExpiry)
			}
			for _, cmd := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "set", "incrby", "incr", "expire", "hget", "hset", "get"} {
				if n := stats[cmd].calls; n != 0 {
					t.Errorf("%s was called %d times; a plain decision sends HINCRBY and PEXPIRE only", strings.ToUpper(cmd), n)
				}
			}
			n := float64(tc.decisions)
			t.Logf("%d decisions, %d replicas, %d hashes: HINCRBY %d, PEXPIRE %d (bound %d), TIME %d: %.4f commands per decision (%.4f with the clocks' TIME)",
				tc.decisions, tc.replicas, len(keys), stats["hincrby"].calls, stats["pexpire"].calls, bound, stats["time"].calls,
				float64(stats["hincrby"].calls+stats["pexpire"].calls)/n, float64(stats["hincrby"].calls+stats["pexpire"].calls+stats["time"].calls)/n)
		})
	}
}

// cloneClient returns a new client with client's options, closed at the
// end of the test: each replica has its own connections.
func cloneClient(t *testing.T, client redis.UniversalClient) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch cl := client.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(cl.Options())
	case *redis.Client:
		c = redis.NewClient(cl.Options())
	default:
		t.Fatalf("cloneClient: unexpected client %T", client)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisNow is Redis's TIME in Unix µs.
func redisNow(t *testing.T, ctx context.Context, client redis.UniversalClient) int64 {
	t.Helper()
	tm, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

// TestAccuracyUnderOverload: four replicas, each with its own client, on
// one Redis (standalone and Cluster), at 10× overload of K counters,
// mixing plain calls (one limit, one hit) with requests of two limits (the
// counter and a per-domain limit that never denies) and two hits, which go
// through the script: no counter admits more than its limit, and once the
// give-backs land each stored count is the hits admitted on it, never
// negative. A run that straddles a window boundary counts into two windows
// and proves nothing; it is run again, once (windows are an hour long).
func TestAccuracyUnderOverload(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		var backends []*Backend
		for range 4 {
			backends = append(backends, newBackend(t, cloneClient(t, client), Options{}))
		}
		for attempt := range 2 {
			if overloadRun(t, client, backends) {
				return
			}
			t.Logf("attempt %d straddled a window boundary; running again", attempt)
		}
		t.Fatal("both runs straddled a window boundary: nothing was checked")
	})
}

// overloadRun runs TestAccuracyUnderOverload once on a fresh domain and
// checks it; false means the run straddled a window boundary, so its
// counts were not checked.
func overloadRun(t *testing.T, client redis.UniversalClient, backends []*Backend) bool {
	t.Helper()
	const (
		counters = 8
		limit    = 50
		overload = 10
		workers  = 8
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	domain := redistest.KeyPrefix(t)
	shared := algo.Check{Domain: domain, Entries: []algo.Entry{{Key: "scope", Value: "domain"}}, HashTag: -1, Policy: hourly(1 << 40)}

	type request struct {
		counter int
		hits    int64 // 1: a plain call; 2: with the shared limit
	}
	var reqs []request
	for k := range counters {
		sent := int64(0)
		for i := 0; sent < overload*limit; i++ {
			hits := int64(1)
			if i%3 == 2 {
				hits = 2
			}
			reqs = append(reqs, request{k, hits})
			sent += hits
		}
	}
	rand.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })

	// A second's slack on each side covers the replicas' clock error
	// (half a round trip).
	before := redisNow(t, ctx, client) - int64(time.Second/time.Microsecond)
	var admitted [counters]atomic.Int64
	var sharedAdmitted atomic.Int64
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		b := backends[w%len(backends)]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(reqs)) {
					return
				}
				r := reqs[i]
				checks := []algo.Check{userCheck(domain, fmt.Sprintf("u%d", r.counter), limit, r.hits)}
				if r.hits == 2 {
					s := shared
					s.Hits = r.hits
					checks = append(checks, s)
				}
				d, err := b.Apply(ctx, time.Now(), checks)
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				if len(checks) == 2 && !d[1].Allowed {
					errs <- fmt.Errorf("request %d: the shared limit denied: %+v", i, d[1])
					return
				}
				if d[0].Allowed {
					admitted[r.counter].Add(r.hits)
					if len(checks) == 2 {
						sharedAdmitted.Add(r.hits)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := redisNow(t, ctx, client) + int64(time.Second/time.Microsecond)
	if algo.WindowIndex(before, algo.Hour) != algo.WindowIndex(after, algo.Hour) {
		return false
	}
	for _, b := range backends {
		b.giveBacks.Wait()
	}

	for k := range counters {
		c := userCheck(domain, fmt.Sprintf("u%d", k), limit, 1)
		hash, field := counter(c, before)
		got := admitted[k].Load()
		// Two hits that do not fit are denied whole, so a counter may
		// end one below its limit when its last free hit was asked in
		// a pair; 10× overload leaves no more unused.
		if got > limit || got < limit-1 {
			t.Errorf("counter %d admitted %d hits, want %d (or %d)", k, got, limit, limit-1)
		}
		stored, err := client.HGet(ctx, hash, field).Int64()
		if err != nil {
			t.Fatalf("HGET %s %s: %v", hash, field, err)
		}
		if stored != got {
			t.Errorf("counter %d: %s %s holds %d after the give-backs, want the %d admitted", k, hash, field, stored, got)
		}
	}
	sh, sf := counter(shared, before)
	if stored, err := client.HGet(ctx, sh, sf).Int64(); err != nil || stored != sharedAdmitted.Load() {
		t.Errorf("the shared limit %s %s holds %d (%v), want the %d hits admitted with it", sh, sf, stored, err, sharedAdmitted.Load())
	}
	hashes := domainHashes(t, ctx, client, domain)
	if len(hashes) == 0 {
		t.Fatal("no counter hash of the run found")
	}
	for _, h := range hashes {
		hashCounts(t, ctx, client, h) // fails on a negative count
	}
	var sum int64
	for k := range counters {
		sum += admitted[k].Load()
	}
	t.Logf("%d requests over %d counters of limit %d: admitted %d hits (at most %d), %d of them with the shared limit",
		len(reqs), counters, limit, sum, counters*limit, sharedAdmitted.Load())
	return true
}

// TestEvictedHash is the Redis that evicts: a window's hash evicted under
// maxmemory (allkeys-lru, or volatile-ttl) loses the counts of every
// counter in it, so those counters start again from 0 and the window
// admits up to one more limit for each, never more; no count ever reads
// negative (the give-backs of denied hits never make one, nor a hash);
// and the hash that the next HINCRBY recreates, without an expiry, gets
// one back from the replica's resent PEXPIRE … NX within a second
// (resendExpiry, expire.go), though the replica's calls to it are few:
// issue 39's fix, where a resend every 64th call left such a hash without
// a TTL. This is the behaviour docs/redis.md ("Eviction") describes.
func TestEvictedHash(t *testing.T) {
	const limit = 5
	for _, policy := range []string{"allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			client := redistest.Standalone(t).Client(t)
			b := newBackend(t, client, Options{CallerTime: true})
			domain := redistest.KeyPrefix(t)
			c := userCheck(domain, "alice", limit, 1)
			if !plainCheck(&c) {
				t.Fatal("the check is no plain call")
			}
			hash, field := counter(c, t0.UnixMicro())
			maxTTL := windowTTL(c.Policy.Period, t0.UnixMicro())
			hit := func(i int, at time.Time) bool {
				t.Helper()
				d, err := b.Apply(ctx, at, []algo.Check{c})
				if err != nil {
					t.Fatalf("hit %d: %v", i, err)
				}
				b.giveBacks.Wait()
				for _, h := range domainHashes(t, ctx, client, domain) {
					hashCounts(t, ctx, client, h)
				}
				return d[0].Allowed
			}
			calls := 0
			for ; calls < limit+1; calls++ {
				if got, want := hit(calls, t0), calls < limit; got != want {
					t.Fatalf("hit %d before the eviction: admitted %v, want %v", calls, got, want)
				}
			}
			checkCountKey(t, ctx, client, hash, field, limit, true)

			evict(t, ctx, client, hash, policy)

			// The counter starts again: limit more hits pass, then
			// none. The hash the first of them recreates has no expiry
			// until the replica's next resend, resendExpiry after its
			// last PEXPIRE (at t0): calls gap apart, far fewer than a
			// count of calls would wait for, give it one back within a
			// second of the recreation.
			const gap = 300 * time.Millisecond
			admitted, ttlAfter := 0, time.Duration(0)
			for i := 1; i <= limit+1 || ttlAfter == 0 && i <= 10; i++ {
				since := time.Duration(i) * gap
				if hit(calls, t0.Add(since)) {
					admitted++
				}
				calls++
				if ttlAfter == 0 {
					if ttl := client.PTTL(ctx, hash).Val(); ttl > 0 {
						if ttl > time.Duration(maxTTL)*time.Millisecond {
							t.Fatalf("%s got PTTL %v, more than the window's %d ms", hash, ttl, maxTTL)
						}
						ttlAfter = since
					}
				}
			}
			if admitted != limit {
				t.Errorf("after the eviction the window admitted %d more hits, want %d (one more limit, never more)", admitted, limit)
			}
			if ttlAfter == 0 || ttlAfter-gap > time.Second {
				t.Errorf("the %s recreated %v after t0 had no TTL %v after t0 (0: never), over %d calls; want one within a second of the recreation", hash, gap, ttlAfter, calls-limit-1)
			}
			checkCountKey(t, ctx, client, hash, field, limit, ttlAfter > 0)
			t.Logf("%s: %d hits before the eviction, %d admitted after it, the hash recreated %v after t0 had a TTL again %v after t0", policy, limit+1, admitted, gap, ttlAfter)
		})
	}
}

// appendR2Key appends the key the previous release ("r2", one key per
// counter) gave a fixed window's counter: r2{<domain>:<k>:<v>:<ap>} and
// two letters naming the window, 'A'+w/26 and 'A'+w%26 with w the window
// index modulo 676. It models that release's layout for
// TestRollingUpgradeFromR2 only; nothing else writes it.
func appendR2Key(dst []byte, c algo.Check, now int64) []byte {
	dst = append(dst, "r2{"...)
	dst = appendPart(dst, c.Domain)
	for _, e := range c.Entries {
		dst = append(dst, ':')
		dst = appendPart(dst, e.Key)
		dst = append(dst, ':')
		dst = appendPart(dst, e.Value)
	}
	dst = append(dst, ':')
	dst = appendPolicy(dst, c.Policy)
	dst = append(dst, '}')
	_, w := divmod(algo.WindowIndex(now, c.Policy.Period), 26*26)
	return append(dst, byte('A'+w/26), byte('A'+w%26))
}

// r2GiveBack is the previous release's give-back of a denied hit, as
// modelled here: a decrement of a count above 0 only.
var r2GiveBack = redis.NewScript(`local v = tonumber(redis.call('GET', KEYS[1]))
if v and v > 0 then return redis.call('DECRBY', KEYS[1], 1) end
return 0`)

// r2Hit is a plain call of the previous release: INCRBY and PEXPIRE of
// the counter's key in one pipeline, admitted when the count is within
// the limit, else given back. It reports whether the hit was admitted.
func r2Hit(ctx context.Context, client redis.UniversalClient, key string, limit, ttlMs int64) (bool, error) {
	pipe := client.Pipeline()
	incr := pipe.IncrBy(ctx, key, 1)
	pipe.PExpire(ctx, key, time.Duration(ttlMs)*time.Millisecond)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("r2 INCRBY/PEXPIRE %s: %w", key, err)
	}
	if incr.Val() <= limit {
		return true, nil
	}
	if err := r2GiveBack.Run(ctx, client, []string{key}).Err(); err != nil {
		return false, fmt.Errorf("r2 give-back %s: %w", key, err)
	}
	return false, nil
}

// TestRollingUpgradeFromR2: during a rolling upgrade an r2 replica (the
// previous release, modelled by r2Hit) and an r3 backend count one counter
// on one Redis at 10× overload each, in one window: r2 and r3 share no
// key, so each admits its limit and no more, and the two together one
// extra limit (LayoutVersion's comment). The server holds exactly the r2
// key and the r3 hash afterwards, each with the count of its own
// version's admitted hits: the backend neither read nor wrote r2's key.
func TestRollingUpgradeFromR2(t *testing.T) {
	const (
		limit    = 20
		overload = 10
		workers  = 2 // per version
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := redistest.Standalone(t).Client(t)
	b := newBackend(t, cloneClient(t, client), Options{CallerTime: true})
	c := userCheck("upgrade", "alice", limit, 1)
	now := t0.UnixMicro()
	r2Key := string(appendR2Key(nil, c, now))
	r3Hash, r3Field := counter(c, now)
	ttl := windowTTL(c.Policy.Period, now)

	var r2Admitted, r3Admitted, r2Sent, r3Sent atomic.Int64
	errs := make(chan error, 2*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for r2Sent.Add(1) <= overload*limit {
				ok, err := r2Hit(ctx, client, r2Key, limit, ttl)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					r2Admitted.Add(1)
				}
			}
		})
		wg.Go(func() {
			for r3Sent.Add(1) <= overload*limit {
				d, err := b.Apply(ctx, t0, []algo.Check{c})
				if err != nil {
					errs <- fmt.Errorf("r3: %w", err)
					return
				}
				if d[0].Allowed {
					r3Admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b.giveBacks.Wait()

	r2n, r3n := r2Admitted.Load(), r3Admitted.Load()
	t.Logf("%d hits each: r2 admitted %d, r3 %d, together %d (limit %d)", overload*limit, r2n, r3n, r2n+r3n, limit)
	// Sequentially consistent counting on each side: each admits its
	// limit exactly; fewer on r3's side would mean it saw r2's hits.
	if r2n != limit || r3n != limit {
		t.Errorf("r2 admitted %d, r3 %d: want %d each (they count apart)", r2n, r3n, limit)
	}
	if r2n+r3n > 2*limit {
		t.Errorf("together %d admitted, more than two limits (%d)", r2n+r3n, 2*limit)
	}
	keys := scanKeys(t, client, "")
	if len(keys) != 2 || !(keys[0] == r2Key && keys[1] == r3Hash || keys[0] == r3Hash && keys[1] == r2Key) {
		t.Fatalf("the server holds %q, want the r2 key %q and the r3 hash %q alone", keys, r2Key, r3Hash)
	}
	if typ := client.Type(ctx, r2Key).Val(); typ != "string" {
		t.Errorf("the r2 key %s is a %s, want a string: the backend wrote it", r2Key, typ)
	}
	if n, err := client.Get(ctx, r2Key).Int64(); err != nil || n != r2n {
		t.Errorf("the r2 key %s holds %d (%v), want the %d hits r2 admitted", r2Key, n, err, r2n)
	}
	counts := hashCounts(t, ctx, client, r3Hash)
	if len(counts) != 1 || counts[r3Field] != r3n {
		t.Errorf("the r3 hash %s holds %v, want %s: %d alone", r3Hash, counts, r3Field, r3n)
	}
}
