package redisalgo

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestCounterHashesReadiness: the first replica to ping records its
// counter-hash count for the deployment; a second replica with another
// count is not ready, with an error naming both counts and the fix, and
// one with the same count is (issue 39). On standalone Redis and on a
// Cluster, where the one meta key lives on one master.
func TestCounterHashesReadiness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		prefix func(t testing.TB) string
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Standalone(t).Client(t) }, func(testing.TB) string { return "" }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).ClusterClient(t) }, redistest.KeyPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client, prefix := tc.client(t), tc.prefix(t)
			replica := func(hashes int) *Backend {
				t.Helper()
				return newBackend(t, client, Options{KeyPrefix: prefix, CounterHashes: hashes})
			}
			if err := replica(0).Ping(ctx); err != nil {
				t.Fatalf("the first replica (default count) is not ready: %v", err)
			}
			if n, err := RecordedCounterHashes(ctx, client, prefix); err != nil || n != DefaultCounterHashes {
				t.Fatalf("recorded count %d, %v; want %d", n, err, DefaultCounterHashes)
			}
			err := replica(32).Ping(ctx)
			if !errors.Is(err, ErrCounterHashesMismatch) {
				t.Fatalf("a replica with 32 counter hashes: Ping = %v, want %v", err, ErrCounterHashesMismatch)
			}
			for _, want := range []string{"this replica's is 32", "the deployment's is " + strconv.Itoa(DefaultCounterHashes), MetaKey(prefix), "--redis-counter-hashes=" + strconv.Itoa(DefaultCounterHashes), "Sizing counter hashes"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error %q does not say %q", err, want)
				}
			}
			if err := replica(DefaultCounterHashes).Ping(ctx); err != nil {
				t.Errorf("a replica with the deployment's count is not ready: %v", err)
			}
			// The planned change (docs/redis.md): with the record
			// deleted, the next replica records its own, and replicas
			// on the old count are no longer ready.
			if err := client.Del(ctx, MetaKey(prefix)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := replica(32).Ping(ctx); err != nil {
				t.Fatalf("after the record was deleted, a replica with 32: %v", err)
			}
			if err := replica(DefaultCounterHashes).Ping(ctx); !errors.Is(err, ErrCounterHashesMismatch) {
				t.Errorf("a replica on the old count after the change: Ping = %v, want %v", err, ErrCounterHashesMismatch)
			}
		})
	}
}

// TestResolveCounterHashes: a tool uses the recorded count, the one it was
// given (or the default) when none is recorded, and refuses a given count
// that differs from the recorded one, naming both.
func TestResolveCounterHashes(t *testing.T) {
	ctx := context.Background()
	client := redistest.SharedStandalone(t).Client(t)
	prefix := redistest.KeyPrefix(t)
	for _, tc := range []struct {
		name            string
		recorded, given int // recorded 0: none
		want            int
		wantErr         string
	}{
		{"none recorded, none given", 0, 0, DefaultCounterHashes, ""},
		{"none recorded, given", 0, 7, 7, ""},
		{"recorded, none given", 64, 0, 64, ""},
		{"recorded and given agree", 64, 64, 64, ""},
		{"recorded and given differ", 64, 16, 0, "given 16, the deployment's is 64"},
		{"given out of range", 0, -1, 0, "must be between"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := MetaKey(prefix)
			if err := client.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.recorded > 0 {
				if err := client.HSet(ctx, key, MetaCounterHashes, tc.recorded).Err(); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ResolveCounterHashes(ctx, client, prefix, tc.given)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ResolveCounterHashes = %d, %v; want an error saying %q", got, err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || got != tc.want):
				t.Fatalf("ResolveCounterHashes = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	t.Run("a record that is no count", func(t *testing.T) {
		if err := client.HSet(ctx, MetaKey(prefix), MetaCounterHashes, "sixteen").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := ResolveCounterHashes(ctx, client, prefix, 0); err == nil || !strings.Contains(err.Error(), `"sixteen"`) {
			t.Fatalf("ResolveCounterHashes = %v, want an error naming the record", err)
		}
	})
}
