package memstore

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
)

// TestQueueSuite runs the queue-mode scenarios on the in-process store.
func TestQueueSuite(t *testing.T) {
	backendtest.RunQueue(t, func(t *testing.T) backendtest.Backend {
		return newStore(t, Options{})
	})
}
