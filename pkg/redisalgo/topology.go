package redisalgo

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// topology is what differs between the two kinds of deployment a Backend
// serves, so that the backend's own code never asks which one it has:
//
//   - oneMaster (New): standalone Redis or a Sentinel-managed master.
//     Every key of a request goes in one script call, one batcher shares
//     pipelines, and there is one shard, 0.
//   - cluster (NewCluster): Redis Cluster. Keys group by hash slot, each
//     call goes to the master serving its slot through that master's
//     batcher, and masters are numbered as shards (shard.go).
type topology interface {
	// slot returns the hash slot key's calls group by.
	slot(key []byte) int
	// sortBySlot orders check indices by their slots (stable, so checks
	// keep their request order inside a group).
	sortBySlot(order, slots []int)
	// forEachMaster runs fn on the master, or on every master.
	forEachMaster(ctx context.Context, fn func(ctx context.Context, m master) error) error
	// loaded records that a call to every master succeeded.
	loaded()
	// route sets the node each call goes to.
	route(calls []call)
	// roundTrip sends calls in one round trip (see Backend.roundTrip).
	roundTrip(ctx context.Context, s *scratch, calls []*call) error
	// settle notes calls' outcomes and returns the error Apply reports
	// for failed, the first failed call's error (nil when none failed).
	settle(calls []call, failed error) error
	// shard returns the shard of c's key, prefix first (Backend.Shard).
	shard(prefix string, c algo.Check) int
	// shardName returns the address shard id names, or "".
	shardName(id int) string
	// clockOf returns the clock of the master of key (a check's, prefix
	// first, as the request built it), and that master's node (nil unless
	// cluster), which route keeps.
	clockOf(key string) (*masterClock, *node)
	// poster returns the batcher that carries give-backs to the master of
	// a call routed to n (nil unless cluster): its request batcher, or
	// one for give-backs alone under Options.NoBatch.
	poster(n *node) *batcher
	// close closes the batchers.
	close()
}

// master is what a Backend asks of each master: *redis.Client, and Client.
type master interface {
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}

// oneMaster is the topology of standalone Redis and Sentinel.
type oneMaster struct {
	b      *Backend
	client Client
	// batch shares pipelines between concurrent requests; nil sends each
	// request's calls alone (Options.NoBatch). backs carries give-backs:
	// batch, or under NoBatch a batcher of its own.
	batch, backs *batcher
	// clock is the master's clock (clock.go).
	clock *masterClock
}

func (t *oneMaster) slot([]byte) int       { return 0 }
func (t *oneMaster) sortBySlot(_, _ []int) {}
func (t *oneMaster) loaded()               {}
func (t *oneMaster) route([]call)          {}

func (t *oneMaster) forEachMaster(ctx context.Context, fn func(context.Context, master) error) error {
	return fn(ctx, t.client)
}

func (t *oneMaster) roundTrip(ctx context.Context, s *scratch, calls []*call) error {
	return t.b.roundTripVia(ctx, s, calls, t.batch, t.clock)
}

func (t *oneMaster) clockOf(string) (*masterClock, *node) { return t.clock, nil }

func (t *oneMaster) settle(_ []call, failed error) error { return failed }
func (t *oneMaster) shard(string, algo.Check) int        { return 0 }
func (t *oneMaster) shardName(int) string                { return "" }

func (t *oneMaster) poster(*node) *batcher { return t.backs }

func (t *oneMaster) close() {
	if t.batch != nil {
		t.batch.close()
	}
	if t.backs != t.batch {
		t.backs.close()
	}
}

// cluster is the topology of Redis Cluster.
type cluster struct {
	b      *Backend
	client ClusterClient
	// nodes numbers the masters and holds their batchers (shard.go).
	nodes *nodes
}

func (t *cluster) slot(key []byte) int { return keySlot(key) }

func (t *cluster) sortBySlot(order, slots []int) {
	slices.SortStableFunc(order, func(x, y int) int { return slots[x] - slots[y] })
}

func (t *cluster) forEachMaster(ctx context.Context, fn func(context.Context, master) error) error {
	return t.client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) })
}

func (t *cluster) loaded() { t.nodes.mapped.Store(true) }

// route sets each call's node, unless requestNows found it already (with
// the clock it placed the call on): a slot group's checks share a master.
func (t *cluster) route(calls []call) {
	for i := range calls {
		if calls[i].node == nil {
			calls[i].node = t.nodes.forKey(calls[i].script.keys[0])
		}
	}
}

func (t *cluster) roundTrip(ctx context.Context, s *scratch, calls []*call) error {
	if t.nodes.newBatch == nil {
		// The calls may go to several masters: no one clock to measure.
		return t.b.roundTripVia(ctx, s, calls, nil, nil)
	}
	return roundTripNodes(ctx, s, calls)
}

func (t *cluster) clockOf(key string) (*masterClock, *node) {
	n := t.nodes.forKey(key)
	return n.clock, n
}

func (t *cluster) settle(calls []call, failed error) error {
	shards := t.nodes.noteResults(calls)
	if failed == nil {
		return nil
	}
	// A dead or demoted master keeps failing until the slot map is
	// refreshed; ask for that now instead of at the next periodic reload.
	t.nodes.reload()
	return &ShardError{Shards: shards, Err: failed}
}

// nodeOf returns the node that serves c's key, prefix first.
func (t *cluster) nodeOf(prefix string, c *algo.Check) *node {
	buf := keyBufs.Get().(*keyBuf)
	buf.reset()
	// Any window's hash has the counter's slot (AppendCounterHash).
	buf.add(prefix, *c, 0, t.b.counterHashes)
	// The view is read only until forKey returns; buf is reset after.
	n := t.nodes.forKey(buf.view(0))
	keyBufs.Put(buf)
	return n
}

func (t *cluster) shard(prefix string, c algo.Check) int {
	n := t.nodeOf(prefix, &c)
	if n.failing.Load() {
		t.nodes.reload()
	}
	return n.id
}

func (t *cluster) shardName(id int) string { return t.nodes.name(id) }
func (t *cluster) close()                  { t.nodes.close() }
func (t *cluster) poster(n *node) *batcher { return n.backs }
