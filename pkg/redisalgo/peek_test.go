package redisalgo

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

func TestDecodeState(t *testing.T) {
	fixed := algo.Policy{Algorithm: algo.FixedWindow, Period: algo.Minute}
	sliding := algo.Policy{Algorithm: algo.SlidingWindow, Period: algo.Second}
	bucket := algo.Policy{Algorithm: algo.TokenBucket, Period: algo.Second}
	tests := []struct {
		name  string
		pol   algo.Policy
		value string
		want  algo.State
		bad   bool
	}{
		// A fixed window's key names its window: Time is the caller's.
		{"fixed window count", fixed, "12", algo.State{Count: 12}, false},
		{"fixed window of count 0", fixed, "0", algo.State{}, false},
		{"fixed window of 10 digits", fixed, "1234567890", algo.State{Count: 1234567890}, false},
		{"fixed window in the old packed layout's colon form", fixed, "7:1234567890", algo.State{}, true},
		{"packed sliding window", sliding, "512321", algo.State{Time: 5 * algo.Second, Count: 12, Prev: 3}, false},
		{"sliding window with colons", sliding, "5:12:3", algo.State{Time: 5 * algo.Second, Count: 12, Prev: 3}, false},
		{"sliding window, previous only", sliding, "5901", algo.State{Time: 5 * algo.Second, Prev: 9}, false},
		{"bucket TAT", bucket, "1700000000000000", algo.State{Time: 1_700_000_000_000_000}, false},
		{"bucket TAT with a fraction", bucket, "17:4", algo.State{Time: 17, Frac: 4}, false},
		{"not a number", bucket, "abc", algo.State{}, true},
		{"too many fields", bucket, "1:2:3", algo.State{}, true},
		{"packed lengths longer than the value", sliding, "19", algo.State{}, true},
		{"sliding log has no string state", algo.Policy{Algorithm: algo.SlidingLog, Period: 1}, "1", algo.State{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeState(tt.pol, tt.value)
			if (err != nil) != tt.bad || !tt.bad && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeState(%q) = %+v, %v; want %+v, bad %v", tt.value, got, err, tt.want, tt.bad)
			}
		})
	}
}

// TestPeekLeavesKeyAlone: a peek changes neither a key's value nor its
// expiry, on every algorithm, on standalone Redis and on a cluster.
func TestPeekLeavesKeyAlone(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, client, Options{})
		for _, a := range algo.Algorithms {
			c := backendtest.UserCheck(redistest.KeyPrefix(t), "alice", backendtest.PerMinute(a, 5), 2)
			if _, err := b.Apply(ctx, t0, []algo.Check{c}); err != nil {
				t.Fatal(err)
			}
			// A fixed window's hash names the window of Redis's time at t0.
			now, _ := b.requestNow(ctx, t0, []algo.Check{c})
			key, field := counter(c, now)
			before, err := client.Dump(ctx, key).Result()
			if err != nil {
				t.Fatalf("%s: DUMP %q: %v", a, key, err)
			}
			ttl := client.PTTL(ctx, key).Val()
			p, err := b.Peek(ctx, t0, []algo.Check{c})
			if err != nil {
				t.Fatalf("%s: Peek: %v", a, err)
			}
			if p[0].Key != key || p[0].Field != field || !p[0].Exists || p[0].TTL <= 0 || p[0].Decision(c.Policy).Remaining != 3 {
				t.Errorf("%s: peek %+v, want key %q with remaining 3 and a TTL", a, p[0], key)
			}
			if after := client.Dump(ctx, key).Val(); after != before {
				t.Errorf("%s: the peek changed the value of %q", a, key)
			}
			// DUMP leaves the expiry out; a TTL only ever counts down.
			if after := client.PTTL(ctx, key).Val(); after > ttl || after <= 0 {
				t.Errorf("%s: the peek moved the expiry of %q from %v to %v", a, key, ttl, after)
			}
		}
	})
}
