package app

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// TestPingShards: the health panel pings every Cluster master, and the one
// master of a standalone client, with a round trip and no error.
func TestPingShards(t *testing.T) {
	cluster := redistest.SharedCluster(t)
	standalone := redistest.SharedStandalone(t)
	opts, err := redisclient.ParseURL("redis://" + standalone.Addr)
	if err != nil {
		t.Fatal(err)
	}
	single, err := redisclient.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	var masters []string
	for _, m := range cluster.Masters(t) {
		masters = append(masters, m.Addr)
	}
	tests := []struct {
		name   string
		client *redisclient.Client
		want   []string
	}{
		{name: "standalone", client: single, want: []string{standalone.Addr}},
		{name: "cluster", client: &redisclient.Client{Cluster: cluster.ClusterClient(t)}, want: masters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := pingShards(tc.client)(ctx)
			if len(got) != len(tc.want) {
				t.Fatalf("%d shards %+v, want %d", len(got), got, len(tc.want))
			}
			seen := map[string]bool{}
			for _, s := range got {
				if s.Error != "" || s.RTTMS <= 0 {
					t.Errorf("shard %+v: want a round trip and no error", s)
				}
				seen[s.Addr] = true
			}
			for _, a := range tc.want {
				if !seen[a] {
					t.Errorf("master %s not pinged: %+v", a, got)
				}
			}
		})
	}
}
