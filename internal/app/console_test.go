package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/console"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// standaloneClient is a client of the standalone Redis at addr, closed
// when t ends.
func standaloneClient(t *testing.T, addr string) *redisclient.Client {
	t.Helper()
	opts, err := redisclient.ParseURL("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := redisclient.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPingShards: the health panel pings every Cluster master, and the one
// master of a standalone client, with a round trip and no error.
func TestPingShards(t *testing.T) {
	cluster := redistest.SharedCluster(t)
	standalone := redistest.SharedStandalone(t)
	single := standaloneClient(t, standalone.Addr)
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

// TestHealthPingsOncePerPoll: any number of polls of the health panel
// within one poll interval, from any number of tabs at once, send each
// master one PING (counted by the master itself, INFO commandstats); the
// next interval's first poll sends one more.
func TestHealthPingsOncePerPoll(t *testing.T) {
	standalone := redistest.Standalone(t)
	cluster := redistest.SharedCluster(t)
	single := standaloneClient(t, standalone.Addr)
	tests := []struct {
		name    string
		client  *redisclient.Client
		masters []*redistest.Server
	}{
		{name: "standalone", client: single, masters: []*redistest.Server{standalone}},
		{name: "cluster", client: &redisclient.Client{Cluster: cluster.ClusterClient(t)}, masters: cluster.Masters(t)},
	}
	const polls = 20
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Unix(1_800_000_000, 0).UnixNano())
			health := console.NewHealth(console.HealthOptions{Store: "redis", Ping: pingShards(tc.client),
				Now: func() time.Time { return time.Unix(0, now.Load()) }})
			base := pingCalls(t, tc.masters)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for range polls {
				wg.Add(1)
				go func() { defer wg.Done(); health(ctx) }()
			}
			wg.Wait()
			for range polls {
				health(ctx)
			}
			assertPings(t, tc.masters, base, pingCalls(t, tc.masters), 1, fmt.Sprintf("%d polls within one interval", 2*polls))
			now.Add(int64(console.HealthPoll))
			for range polls {
				health(ctx)
			}
			assertPings(t, tc.masters, base, pingCalls(t, tc.masters), 2, "the next interval's polls")
		})
	}
}

// pingCalls is each master's count of PING calls (INFO commandstats).
func pingCalls(t *testing.T, masters []*redistest.Server) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range masters {
		info, err := m.Client(t).Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_ping:calls="); ok {
				n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				out[m.Addr] = n
			}
		}
	}
	return out
}

func assertPings(t *testing.T, masters []*redistest.Server, base, now map[string]int64, want int64, what string) {
	t.Helper()
	for _, m := range masters {
		if got := now[m.Addr] - base[m.Addr]; got != want {
			t.Errorf("%s: master %s got %d PINGs, want %d", what, m.Addr, got, want)
		}
	}
}
