package stack

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// TestQueueSuite runs the queue-mode scenarios through the whole stack on
// the in-process store and on standalone Redis (deny cache included).
func TestQueueSuite(t *testing.T) {
	backendtest.RunQueue(t, func(t *testing.T) backendtest.Backend { return newStack(t, Config{}) })
	t.Run("standalone", func(t *testing.T) {
		backendtest.RunQueue(t, func(t *testing.T) backendtest.Backend {
			return newStack(t, Config{
				Redis:   &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)},
				Timeout: 10 * time.Second, DenyCacheEntries: 1000, CallerTime: true,
			})
		})
	})
}

// TestQueueAcrossPerSecond: a request queued on the per-second Redis whose
// main-Redis limit denies is denied, and its reservation cancelled, so the
// next request gets the same slot.
func TestQueueAcrossPerSecond(t *testing.T) {
	s, _, _ := perSecondStack(t)
	q := backendtest.QueueCheck(t.Name(), "q", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
	daily := backendtest.QueueCheck(t.Name(), "daily", algo.Policy{Algorithm: algo.GCRA, Limit: 2, Period: algo.Day}, algo.Second)
	now := backendtest.Start
	backendtest.Apply(t, s, now, q)
	if ds := backendtest.Apply(t, s, now, q, daily); !ds[0].Allowed || ds[0].Delay != 100_000 || !ds[1].Allowed {
		t.Fatalf("queued with an admitting main-Redis limit: %+v, want both allowed after 100ms", ds)
	}
	backendtest.Apply(t, s, now, daily)
	if ds := backendtest.Apply(t, s, now, q, daily); ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("queued with a denying main-Redis limit: %+v, want denied", ds)
	}
	if d := backendtest.Apply(t, s, now, q)[0]; d.Delay != 200_000 {
		t.Fatalf("alone again: %+v, want queued 200ms (the denied request's reservation was cancelled)", d)
	}
}
