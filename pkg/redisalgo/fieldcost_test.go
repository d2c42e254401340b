package redisalgo

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// BenchmarkHashFieldCost measures what a fixed window's hit costs Redis
// to execute (INFO commandstats, µs per call) as its hash holds more
// fields, for docs/redis.md's sizing advice: HINCRBY finds a field in a
// compact (listpack) hash by a linear scan, so its cost grows with the
// fields. Each size is measured on a fresh server twice: 100 000 hits
// that each add a field (a window's first hits, as with uniform keys),
// then 100 000 on the fields that exist; beside it, the reference's
// INCRBY and EXPIRE of new keys. It ignores b.N; run it with
// -benchtime=1x.
func BenchmarkHashFieldCost(b *testing.B) {
	const n = 100_000
	for _, fields := range []int{1, 4, 16, 32, 64, 128, 256, 512} {
		b.Run(fmt.Sprintf("fields_%d", fields), func(b *testing.B) {
			client := redistest.Standalone(b).Client(b)
			ctx := context.Background()
			hashes := n / fields
			hit := func(ctx context.Context, from, to int) error {
				pipe := client.Pipeline()
				for i := from; i < to; i++ {
					// Round robin: every hash grows evenly, as a window's
					// do.
					pipe.HIncrBy(ctx, "r3{perf:f1:"+strconv.Itoa(i%hashes)+"}0abc", hashLayoutField(i), 1)
				}
				_, err := pipe.Exec(ctx)
				return err
			}
			for _, phase := range []string{"insert", "existing"} {
				if err := client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				fill(b, n, 1, hit)
				us := commandUsec(b, ctx, client, "hincrby", n)
				b.ReportMetric(us, phase+"_µs/hit")
			}
			b.Logf("%d fields per hash (%s)", fields, client.ObjectEncoding(ctx, "r3{perf:f1:0}0abc").Val())
		})
	}
	b.Run("reference_new_keys", func(b *testing.B) {
		client := redistest.Standalone(b).Client(b)
		ctx := context.Background()
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		fill(b, n, 1, func(ctx context.Context, from, to int) error {
			pipe := client.Pipeline()
			for i := from; i < to; i++ {
				k := memDomain + "_" + memKey + "_" + memUser(i) + "_1796190000"
				pipe.IncrBy(ctx, k, 1)
				pipe.Expire(ctx, k, time.Minute)
			}
			_, err := pipe.Exec(ctx)
			return err
		})
		b.ReportMetric(commandUsec(b, ctx, client, "incrby", n)+commandUsec(b, ctx, client, "expire", n), "µs/hit")
	})
}

// hashLayoutField is counter i's field: the descriptor's entries.
func hashLayoutField(i int) string { return memKey + ":" + memUser(i) }

// commandUsec is INFO commandstats' µs per call of cmd since the last
// CONFIG RESETSTAT; it fails unless cmd was called calls times.
func commandUsec(tb testing.TB, ctx context.Context, client *redis.Client, cmd string, calls int) float64 {
	tb.Helper()
	st := commandStats(tb, ctx, client)[cmd]
	if st.calls != int64(calls) {
		tb.Fatalf("%s was called %d times, want %d", cmd, st.calls, calls)
	}
	return st.usec / float64(st.calls)
}
