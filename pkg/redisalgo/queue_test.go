package redisalgo

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestQueueSuite runs the queue-mode scenarios on standalone Redis and the
// cluster, and the shaping scenario across four replicas sharing one Redis:
// every reservation is made in a script call, so together they admit no
// more than one backend would, 100 ms apart.
func TestQueueSuite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.SharedStandalone(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).ClusterClient(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client(t)
			f := func(t *testing.T) backendtest.Backend { return newBackend(t, client, Options{CallerTime: true}) }
			backendtest.RunQueue(t, f)
			t.Run("FourReplicas", func(t *testing.T) {
				replicas := []backendtest.Backend{f(t), f(t), f(t), f(t)}
				c := backendtest.QueueCheck(t.Name(), "k", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
				passes, denied := backendtest.ConcurrentAdmissions(t, replicas, backendtest.Start, 40, c)
				backendtest.CheckShaped(t, passes, denied, 40, 6, backendtest.Start, backendtest.ShapingPolicy)
			})
		})
	}
}

// TestQueueAcrossSlotsDenies: on a cluster, a request whose keys span two
// hash slots does not queue (each slot's script call would pick its own
// wait); it is denied, and what the other slot consumed is refunded.
func TestQueueAcrossSlotsDenies(t *testing.T) {
	b := newBackend(t, redistest.SharedCluster(t).ClusterClient(t), Options{CallerTime: true})
	q := backendtest.QueueCheck(t.Name(), "q", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
	other := backendtest.QueueCheck(t.Name(), "other", algo.Policy{Algorithm: algo.TokenBucket, Limit: 100, Period: algo.Second}, 0)
	for v := 0; keySlot(AppendKey(nil, other)) == keySlot(AppendKey(nil, q)); v++ {
		other.Entries[0].Value = "other" + string(rune('a'+v))
	}
	backendtest.Apply(t, b, backendtest.Start, q)
	ds := backendtest.Apply(t, b, backendtest.Start, q, other)
	if ds[0].Allowed || ds[0].Delay != 0 {
		t.Fatalf("a queued limit beside a key of another slot: %+v, want denied", ds)
	}
	if d := backendtest.Apply(t, b, backendtest.Start, q)[0]; d.Delay != 100_000 {
		t.Fatalf("alone again: %+v, want queued 100ms (the cross-slot request reserved nothing)", d)
	}
}
