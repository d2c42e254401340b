package denycache

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
)

// TestQueueSuite: queue mode passes through the cache, whose denials of a
// queue-mode limit last only until the limit would queue again.
func TestQueueSuite(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			backendtest.RunQueue(t, func(t *testing.T) backendtest.Backend {
				next, prefix := bk.make(t)
				return newCache(t, prefixed{next, prefix}, Options{})
			})
		})
	}
}

// TestQueueDenialExpiresWhenItWouldQueue: a queue-mode limit's denial is
// cached only until a request would queue again (RetryAfter − MaxDelay),
// not until it would pass outright.
func TestQueueDenialExpiresWhenItWouldQueue(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			next, prefix := bk.make(t)
			c := newCache(t, prefixed{next, prefix}, Options{})
			q := backendtest.QueueCheck(t.Name(), "k", backendtest.ShapingPolicy, backendtest.ShapingMaxDelay)
			now := backendtest.Start
			for range 6 { // one passes, five queue up to +500ms
				backendtest.Apply(t, c, now, q)
			}
			if d := backendtest.Apply(t, c, now, q)[0]; d.Allowed || d.RetryAfter != 600_000 {
				t.Fatalf("seventh: %+v, want denied, retry 600ms", d)
			}
			// 100 ms later the wait is 500 ms: it queues, cache or not.
			if d := backendtest.Apply(t, c, now+100_000, q)[0]; !d.Allowed || d.Delay != 500_000 {
				t.Fatalf("100ms later: %+v, want queued 500ms", d)
			}
		})
	}
}
