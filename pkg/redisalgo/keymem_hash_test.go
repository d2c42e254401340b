package redisalgo

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// Issue 33's candidate data model, measured before it is built: a fixed
// window's counters as fields of a few hashes per rule and window
// (HINCRBY <hash> <field> 1), each hash with one expiry, set once per
// window, where today each counter is a key of its own with an expiry of
// its own. The figures are in BENCHMARKS.md ("Issue 33: counters as hash
// fields"); nothing in the backend writes this layout yet.

// hashLayoutName is the candidate's hash name for bucket b of the issue's
// rule (domain perf, key, per minute) in window letters AB: the rule and
// the bucket in the hash tag, so a rule's buckets spread over Cluster
// slots, and the window after it, as a fixed window's key carries it
// today (AppendKeyAt).
func hashLayoutName(b int) string {
	return "r3{" + memDomain + ":" + memKey + ":f1o:" + strconv.Itoa(b) + "}AB"
}

// hashLayoutField is counter i's field: the descriptor's entries, which
// the hash name does not carry (the domain, algorithm, period and window
// are the hash's).
func hashLayoutField(i int) string { return memKey + ":" + memUser(i) }

// hashLayoutBucket picks counter i's bucket of buckets: a hash of its
// field, as the backend would hash the descriptor.
func hashLayoutBucket(i, buckets int) int {
	h := fnv.New32a()
	h.Write([]byte(hashLayoutField(i)))
	return int(h.Sum32() % uint32(buckets))
}

// hashLayoutMemory returns used_memory's growth per counter after n
// counters are written as fields of buckets hashes, each hash given its
// expiry once (PEXPIRE … NX, as a replica would send it once per hash and
// window), on a fresh server, and the largest hash's field count and
// encoding. listpackEntries, when above 0, is set as the server's
// hash-max-listpack-entries first (Redis's default is 512; 128 leaves
// room for an operator's lower bound and keeps a listpack scan short). It
// fails unless the hashes hold exactly n fields.
func hashLayoutMemory(tb testing.TB, n, buckets, listpackEntries int) (perCounter float64, largest int64, encoding string) {
	tb.Helper()
	client := redistest.Standalone(tb).Client(tb)
	if listpackEntries > 0 {
		if err := client.ConfigSet(context.Background(), "hash-max-listpack-entries", strconv.Itoa(listpackEntries)).Err(); err != nil {
			tb.Fatalf("CONFIG SET hash-max-listpack-entries: %v", err)
		}
	}
	write := func(ctx context.Context, from, to int) error {
		pipe := client.Pipeline()
		for i := from; i < to; i++ {
			pipe.HIncrBy(ctx, hashLayoutName(hashLayoutBucket(i, buckets)), hashLayoutField(i), 1)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	// No awaitFreshMinute: the hashes get their expiry after the fill.
	// A warm-up write outside the measured counters, in a hash of its own,
	// so the client's buffers exist before the baseline.
	before := warmUp(tb, client, func(ctx context.Context) error {
		return client.HIncrBy(ctx, "warm", "f", 1).Err()
	})
	fill(tb, n, 4, write)
	ctx := context.Background()
	pipe := client.Pipeline()
	for b := range buckets {
		pipe.Do(ctx, "pexpire", hashLayoutName(b), time.Minute.Milliseconds(), "nx")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("PEXPIRE NX the hashes: %v", err)
	}
	var total int64
	for b := range buckets {
		l, err := client.HLen(ctx, hashLayoutName(b)).Result()
		if err != nil {
			tb.Fatal(err)
		}
		total += l
		if l > largest {
			largest = l
			encoding = client.ObjectEncoding(ctx, hashLayoutName(b)).Val()
		}
	}
	if total != int64(n) {
		tb.Fatalf("the hashes hold %d fields, want %d", total, n)
	}
	finishRehash(tb, client, buckets+1)
	return (infoSum(tb, client, "memory", "used_memory:") - before) / float64(n), largest, encoding
}

// BenchmarkHashLayoutMemory measures the candidate layout's memory per
// counter beside BenchmarkKeyMemory's figures for today's layout and the
// reference: 100 000 counters of the rule in one window, in as
// many hashes as keep each within a listpack bound of 128 entries, in
// fewer, larger hashes under Redis's default bound (512) and under 128,
// where they are hashtables, and in so many that most hold one counter.
// It ignores b.N; run it with -benchtime=1x.
func BenchmarkHashLayoutMemory(b *testing.B) {
	const n = 100_000
	for _, tc := range []struct{ buckets, listpackEntries int }{{100_000, 128}, {6250, 128}, {2048, 128}, {1024, 128}, {256, 0}, {256, 128}, {16, 128}} {
		b.Run(fmt.Sprintf("buckets_%d_listpack_%d", tc.buckets, tc.listpackEntries), func(b *testing.B) {
			buckets := tc.buckets
			per, largest, enc := hashLayoutMemory(b, n, buckets, tc.listpackEntries)
			b.ReportMetric(per, "bytes/counter")
			b.Logf("%d counters in %d hashes (%q, field %q): %.1f bytes/counter; largest hash %d fields, %s",
				n, buckets, hashLayoutName(0), hashLayoutField(0), per, largest, enc)
		})
	}
}
