package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// recGate is an algo.ShardGate that records the shards of each call and
// refuses those in refuse.
type recGate struct {
	calls  [][]int
	refuse []int
}

var errGateRefused = errors.New("test gate refused")

func (g *recGate) AllowShards(shards []int) error {
	g.calls = append(g.calls, slices.Clone(shards))
	for _, id := range shards {
		if slices.Contains(g.refuse, id) {
			return errGateRefused
		}
	}
	return nil
}

// gated applies checks under a fresh gate refusing refuse, and returns
// the shards of each of the gate's calls.
func gated(t *testing.T, b *Backend, checks []algo.Check, refuse ...int) ([][]int, []algo.Decision, error) {
	t.Helper()
	g := &recGate{refuse: refuse}
	d, err := b.Apply(algo.WithShardGate(context.Background(), g), t0, checks)
	return g.calls, d, err
}

// shardOf returns the one shard a request of c alone asks the gate for.
func shardOf(t *testing.T, b *Backend, c algo.Check) int {
	t.Helper()
	calls, _, err := gated(t, b, []algo.Check{c})
	if err != nil || len(calls) != 1 || len(calls[0]) != 1 {
		t.Fatalf("one check: gate calls %v, %v; want one call with one shard", calls, err)
	}
	return calls[0][0]
}

// TestShards: on a cluster, Apply asks the shard gate once per request,
// before sending, with each distinct number of the masters its checks go
// to (ShardName is its address); a refusal sends nothing; a failed call's
// ShardError names the shard of its master alone. Standalone Redis is one
// shard, 0.
func TestShards(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	client := cl.ClusterClient(t)
	b := newBackend(t, client, newClock().opts())
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.TokenBucket, 3)
	checks := onEachMaster(t, cl, dom, pol)
	ids := make([]int, len(checks))
	for i, c := range checks {
		id := shardOf(t, b, c)
		if id == 0 || slices.Contains(ids, id) {
			t.Fatalf("master %d: shard %d, want a nonzero number of its own (so far %v)", i, id, ids)
		}
		ids[i] = id
		want := cl.MasterForSlot(t, keySlot(keyOf(c))).Addr
		if got := b.ShardName(id); got != want {
			t.Errorf("ShardName(%d) = %q, want the master's address %q", id, got, want)
		}
	}

	// Two more checks on master 0 (another key, and the same key merged):
	// still one call, each master once.
	other := onEachMaster(t, cl, dom+"-other", pol)[0]
	calls, _, err := gated(t, b, append(slices.Clone(checks), other, checks[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || !slices.Equal(slices.Sorted(slices.Values(calls[0])), slices.Sorted(slices.Values(ids))) {
		t.Errorf("gate calls %v, want one call with each of %v once", calls, ids)
	}

	// Refused on master 1: nothing is sent, so nothing is consumed on any
	// master. Each check has 3 hits left of its 3 minus the two calls above
	// (master 0's: the three of them); a consumed refused request would
	// leave fewer.
	fresh := onEachMaster(t, cl, dom+"-refused", pol)
	for range 5 {
		if _, _, err := gated(t, b, fresh, ids[1]); !errors.Is(err, errGateRefused) {
			t.Fatalf("gate refusing shard %d: %v, want its error", ids[1], err)
		}
	}
	for i, c := range fresh {
		if got := remaining(t, b, c); got != 3 {
			t.Errorf("master %d after refused requests: %d remaining, want 3 (nothing consumed)", i, got)
		}
	}

	// A key of the wrong type makes the script fail on one master only.
	bad := checks[1]
	if err := client.Del(ctx, string(keyOf(bad))).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.LPush(ctx, string(keyOf(bad)), "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = b.Apply(ctx, t0, checks)
	var se *ShardError
	if !errors.As(err, &se) || !slices.Equal(se.FailedShards(), []int{ids[1]}) {
		t.Fatalf("Apply with one failing master: %v, want a ShardError naming shard %d alone", err, ids[1])
	}
	if _, err := b.Apply(ctx, t0, []algo.Check{checks[0], checks[2]}); err != nil {
		t.Errorf("Apply on the other masters: %v", err)
	}

	sb := newBackend(t, redistest.SharedStandalone(t).Client(t), newClock().opts())
	if calls, _, err := gated(t, sb, checks); err != nil || len(calls) != 1 || !slices.Equal(calls[0], []int{0}) {
		t.Errorf("standalone: gate calls %v, %v; want one call with shard 0", calls, err)
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
