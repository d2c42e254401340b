package redisalgo

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// queueSuite runs the queue-mode scenarios on client's Redis (standalone
// or cluster; TestBackendSuite calls it), and the shaping scenario across
// four replicas sharing it: every reservation is made in a script call, so
// together they admit no more than one backend would, 100 ms apart.
func queueSuite(t *testing.T, client redis.UniversalClient) {
	f := func(t *testing.T) backendtest.Backend { return newBackend(t, client, Options{CallerTime: true}) }
	backendtest.RunQueue(t, f)
	t.Run("FourReplicas", func(t *testing.T) {
		replicas := []backendtest.Backend{f(t), f(t), f(t), f(t)}
		c := backendtest.QueueCheck(t.Name(), "k", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
		passes, denied := backendtest.ConcurrentAdmissions(t, replicas, backendtest.Start, 40, c)
		backendtest.CheckShaped(t, passes, denied, 40, 6, backendtest.Start, backendtest.ShapingPolicy)
	})
}

// TestQueueAcrossSlots: on a cluster, a request whose keys span two hash
// slots queues on the first slot's limits and applies the other slot's at
// arrival; when the other slot denies, the reservation is cancelled, so
// the next request gets its slot.
func TestQueueAcrossSlots(t *testing.T) {
	b := newBackend(t, redistest.SharedCluster(t).ClusterClient(t), Options{CallerTime: true})
	q := backendtest.QueueCheck(t.Name(), "q", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
	other := backendtest.QueueCheck(t.Name(), "other", algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Minute}, 0)
	for v := 0; keySlot(keyOf(other)) == keySlot(keyOf(q)); v++ {
		other.Entries[0].Value = "other" + string(rune('a'+v))
	}
	now := backendtest.Start
	backendtest.Apply(t, b, now, q)
	ds := backendtest.Apply(t, b, now, q, other)
	if !ds[0].Allowed || !ds[1].Allowed || ds[0].Delay != 100_000 {
		t.Fatalf("queued beside an admitting key of another slot: %+v, want both allowed, queued 100ms", ds)
	}
	ds = backendtest.Apply(t, b, now, q, other)
	if ds[0].Allowed || ds[1].Allowed || ds[0].Delay != 0 {
		t.Fatalf("queued beside a denying key of another slot: %+v, want denied", ds)
	}
	if d := backendtest.Apply(t, b, now, q)[0]; d.Delay != 200_000 {
		t.Fatalf("alone again: %+v, want queued 200ms (the denied request's reservation was cancelled)", d)
	}
}
