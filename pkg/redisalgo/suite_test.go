package redisalgo

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// TestBackendSuite runs the behaviour every backend shares on standalone
// Redis and on the 3-master cluster.
func TestBackendSuite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.SharedStandalone(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).ClusterClient(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client(t)
			backendtest.Run(t, func(t *testing.T) backendtest.Backend {
				b, err := open(client, Options{CallerTime: true})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return b
			})
			t.Run("Peek", func(t *testing.T) {
				backendtest.RunPeek(t, func(t *testing.T) backendtest.Peeker {
					return newBackend(t, client, Options{CallerTime: true})
				})
			})
			t.Run("Queue", func(t *testing.T) { queueSuite(t, client) })
		})
	}
}
