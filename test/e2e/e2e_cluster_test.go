package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// exhaustClient sends shopRules' per_client token bucket (5 per hour) for
// value, of which used were consumed before: the rest pass with exact
// remaining counts, then one is OVER_LIMIT.
func exhaustClient(t *testing.T, s *server, value string, used uint32) {
	t.Helper()
	for i := used; i < 5; i++ {
		st := onlyStatus(t, s.ask("shop", desc("client", value)))
		if st.GetCode() != pb.RateLimitResponse_OK || st.GetLimitRemaining() != 4-i {
			t.Fatalf("client=%s request %d: %v, want OK with limit_remaining %d", value, i+1, st, 4-i)
		}
	}
	if st := onlyStatus(t, s.ask("shop", desc("client", value))); st.GetCode() != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("client=%s request 6: %v, want OVER_LIMIT", value, st)
	}
}

// clusterKeys returns every key on every master.
func clusterKeys(t *testing.T, cc *redis.ClusterClient) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var mu sync.Mutex
	var keys []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, "*").Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func keySlot(t *testing.T, cc *redis.ClusterClient, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(slot)
}

// keyFor finds the one key whose hash tag is tag.
func keyFor(t *testing.T, keys []string, tag string) string {
	t.Helper()
	for _, k := range keys {
		if hashTag(k) == tag {
			return k
		}
	}
	t.Fatalf("no key tagged {%s} among %d keys", tag, len(keys))
	return ""
}

// backgroundLoad sends requests for fresh users until stop is closed (at
// most max requests) and returns how many were sent and how many failed.
func backgroundLoad(s *server, stop <-chan struct{}, max int) (wait func() (sent, failed int64)) {
	var sent, failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < max; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop",
				Descriptors: []*rlv3.RateLimitDescriptor{desc("user", fmt.Sprintf("load-%d", i)), desc("client", fmt.Sprintf("load-%d", i))}})
			cancel()
			sent.Add(1)
			if err != nil {
				failed.Add(1)
			}
		}
	}()
	return func() (int64, int64) { <-done; return sent.Load(), failed.Load() }
}

// TestClusterE2E runs the binary on a 3-master Redis Cluster: the burst
// scenario (whose mixed request spans slots and exercises the refund of
// groups that consumed), a request spread over many slots, hash_tag
// co-location, and a CLUSTER FAILOVER and a master kill under load.
func TestClusterE2E(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	s := startServer(t, serveOpts{
		ConfigDir: rulesDir(t, map[string]string{"shop.yaml": shopRules, "tagged.yaml": taggedRules}),
		Args:      []string{"--redis-url", "redis+cluster://" + strings.Join(c.Addrs, ",")},
	})
	cc := c.ClusterClient(t)
	runBurst(t, s, "cluster")

	// One request, many limits, many slots: no CROSSSLOT.
	var many []*rlv3.RateLimitDescriptor
	for i := range 30 {
		many = append(many, desc("user", fmt.Sprintf("spread-%d", i)))
	}
	resp := s.ask("shop", many...)
	if resp.GetOverallCode() != pb.RateLimitResponse_OK || len(resp.GetStatuses()) != len(many) {
		t.Fatalf("30 descriptors: %v", resp)
	}
	if got := s.ask("tagged", desc("user_id", "alice")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Fatalf("tagged user: %v", got)
	}
	keys := clusterKeys(t, cc)
	masters := map[string]bool{}
	for i := range many {
		k := keyFor(t, keys, fmt.Sprintf("shop:user:spread-%d:s1uo0/30", i))
		masters[c.MasterForSlot(t, keySlot(t, cc, k)).Addr] = true
	}
	if len(masters) < 2 {
		t.Errorf("30 limits landed on %d master(s), want them spread", len(masters))
	}
	// A hash-tagged key's tag is its domain and its tagged value's
	// bucket, which both of alice's limits share.
	var alice []string
	for _, k := range keys {
		if strings.HasPrefix(hashTag(k), "tagged:#") && strings.Contains(k, "}user_id:alice:#:") {
			alice = append(alice, k)
		}
	}
	if len(alice) != 2 || keySlot(t, cc, alice[0]) != keySlot(t, cc, alice[1]) {
		t.Errorf("hash_tag keys %v: want 2 keys in one slot", alice)
	}

	// CLUSTER FAILOVER of the shard holding client=fo, under load: the
	// counts survive (the failover is lossless) and decisions stay exact.
	for range 2 {
		s.ask("shop", desc("client", "fo"))
	}
	foKey := keyFor(t, clusterKeys(t, cc), "shop:client:fo:t2s0")
	stop := make(chan struct{})
	wait := backgroundLoad(s, stop, 5000)
	c.Failover(t, keySlot(t, cc, foKey))
	close(stop)
	sent, failed := wait()
	// Calls blocked on the pausing master may time out (UNAVAILABLE, for
	// Envoy's failure mode to decide); what must hold is what follows.
	t.Logf("CLUSTER FAILOVER: %d of %d requests under load failed", failed, sent)
	exhaustClient(t, s, "fo", 2)

	// Kill the master of client=km's shard: once its replica is promoted,
	// requests are served again and fresh limits decide exactly.
	s.ask("shop", desc("client", "km"))
	kmKey := keyFor(t, clusterKeys(t, cc), "shop:client:km:t2s0")
	stop = make(chan struct{})
	wait = backgroundLoad(s, stop, 5000)
	c.KillMaster(t, keySlot(t, cc, kmKey))
	eventually.True(t, "requests served after the master kill", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{checkOnly(desc("client", "km"))}})
		return err == nil, fmt.Sprint(err)
	})
	close(stop)
	sent, failed = wait()
	t.Logf("master kill: %d of %d requests under load failed", failed, sent)
	exhaustClient(t, s, "km-after", 0)
	s.stop()
}

// TestSentinelE2E runs the binary on Sentinel and kills the master: the
// client follows the promoted replica.
func TestSentinelE2E(t *testing.T) {
	t.Parallel()
	ss := redistest.Sentinel(t)
	s := startServer(t, serveOpts{
		ConfigDir: rulesDir(t, map[string]string{"shop.yaml": shopRules}),
		Args:      []string{"--redis-url", "redis+sentinel://" + strings.Join(ss.SentinelAddrs, ",") + "/" + ss.MasterName},
	})
	runBurst(t, s, "sentinel")
	killed, promoted := ss.KillMaster(t)
	t.Logf("killed master %s, promoted %s", killed.Addr, promoted.Addr)
	eventually.True(t, "requests served by the new master", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{checkOnly(desc("client", "probe"))}})
		return err == nil, fmt.Sprint(err)
	})
	exhaustClient(t, s, "after-failover", 0)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	n, err := promoted.Client(t).Exists(ctx, "r3{shop:client:after-failover:t2s0}").Result()
	if err != nil || n != 1 {
		t.Errorf("the new master %s does not hold the new key: %v %v", promoted.Addr, n, err)
	}
	s.awaitReadyz(t, "/readyz after failover", http.StatusOK, "")
	s.stop()
}
