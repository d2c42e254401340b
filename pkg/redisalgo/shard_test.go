package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// onEachMaster returns, for each master of cl, a check whose key that
// master serves, in the order of cl.Masters.
func onEachMaster(t *testing.T, cl *redistest.ClusterSet, dom string, pol algo.Policy) []algo.Check {
	t.Helper()
	masters := cl.Masters(t)
	out := make([]algo.Check, len(masters))
	found := 0
	for i := 0; found < len(masters); i++ {
		if i == 10_000 {
			t.Fatalf("no check of %v found on every master (%d of %d)", pol, found, len(masters))
		}
		c := backendtest.UserCheck(dom, fmt.Sprint("u", i), pol, 1)
		key, _ := counter(c, 0)
		addr := cl.MasterForSlot(t, keySlot([]byte(key))).Addr
		for k, m := range masters {
			if m.Addr == addr && out[k].Domain == "" {
				out[k] = c
				found++
			}
		}
	}
	return out
}

// TestShards: on a cluster, Shard numbers the master that serves a check's
// key (ShardName is its address), and a failed call's ShardError names the
// shard of its master alone. Standalone Redis is one shard, 0.
func TestShards(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	client := cl.ClusterClient(t)
	b := newBackend(t, client, newClock().opts())
	dom := redistest.KeyPrefix(t)
	checks := onEachMaster(t, cl, dom, backendtest.PerMinute(algo.TokenBucket, 3))
	ids := map[int]bool{}
	for i, c := range checks {
		id := b.Shard(c)
		if id == 0 || ids[id] {
			t.Fatalf("master %d: shard %d, want a nonzero number of its own (so far %v)", i, id, ids)
		}
		ids[id] = true
		want := cl.MasterForSlot(t, keySlot(keyOf(c))).Addr
		if got := b.ShardName(id); got != want {
			t.Errorf("ShardName(%d) = %q, want the master's address %q", id, got, want)
		}
	}

	// A key of the wrong type makes the script fail on one master only.
	bad := checks[1]
	if err := client.LPush(ctx, string(keyOf(bad)), "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Apply(ctx, t0, checks)
	var se *ShardError
	if !errors.As(err, &se) || len(se.FailedShards()) != 1 || se.FailedShards()[0] != b.Shard(bad) {
		t.Fatalf("Apply with one failing master: %v, want a ShardError naming shard %d alone", err, b.Shard(bad))
	}
	if _, err := b.Apply(ctx, t0, []algo.Check{checks[0], checks[2]}); err != nil {
		t.Errorf("Apply on the other masters: %v", err)
	}

	sb := newBackend(t, redistest.SharedStandalone(t).Client(t), newClock().opts())
	if id := sb.Shard(checks[0]); id != 0 {
		t.Errorf("standalone Shard = %d, want 0", id)
	}
}

// TestClusterBatchPerNode: a pipeline stuck on one master (held here, as a
// hung master holds it) delays no request for another master: each master
// has its own batcher. With one batcher for the cluster, those requests
// would queue behind the stuck pipeline until it returned.
func TestClusterBatchPerNode(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	b := newBackend(t, cl.ClusterClient(t), Options{CallerTime: true})
	checks := onEachMaster(t, cl, redistest.KeyPrefix(t), backendtest.PerMinute(algo.FixedWindow, 5))
	stuck, release := holdFirst(t, b, checks[0])
	// A request on the stuck master queues behind its pipeline.
	queued := applyAsync(ctx, b, checks[0])
	// Liveness bound only: the requests below need one round trip on
	// loopback; 10 s means they waited for the held pipeline.
	const bound = 10 * time.Second
	for i, c := range checks[1:] {
		select {
		case r := <-applyAsync(ctx, b, c):
			if r.err != nil || !r.d[0].Allowed {
				t.Errorf("master %d: %+v, %v", i+1, r.d, r.err)
			}
		case <-time.After(bound):
			t.Fatalf("a request for master %d still waits after %v while master 0's pipeline is held", i+1, bound)
		}
	}
	select {
	case r := <-queued:
		t.Fatalf("a request for the held master returned before its pipeline: %+v, %v", r.d, r.err)
	default:
	}
	release()
	for _, ch := range []<-chan result{stuck, queued} {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
}
