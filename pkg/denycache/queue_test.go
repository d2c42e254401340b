package denycache

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
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
