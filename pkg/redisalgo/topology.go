package redisalgo

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
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
	// route sets s.nodes, the master of each check of s (nil unless
	// cluster), from the keys and slots s holds (Backend.route).
	route(s *scratch)
	// roundTrip sends calls in one round trip (see Backend.roundTrip).
	roundTrip(ctx context.Context, s *scratch, calls []*call) error
	// settle notes calls' outcomes and returns the error Apply reports
	// for failed, the first failed call's error (nil when none failed).
	settle(calls []call, failed error) error
	// shardName returns the address shard id names, or "".
	shardName(id int) string
	// checkClock returns the clock of check i's master, once route has
	// run on s.
	checkClock(s *scratch, i int) *masterClock
	// clockOf returns the clock of the master of key (a check's, prefix
	// first, as AppendKey builds it), for a read outside Apply (Peek).
	clockOf(key string) *masterClock
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
func (t *oneMaster) route(*scratch)        {}

func (t *oneMaster) forEachMaster(ctx context.Context, fn func(context.Context, master) error) error {
	return fn(ctx, t.client)
}

func (t *oneMaster) roundTrip(ctx context.Context, s *scratch, calls []*call) error {
	return t.b.roundTripVia(ctx, s, calls, t.batch, t.clock)
}

func (t *oneMaster) clockOf(string) *masterClock           { return t.clock }
func (t *oneMaster) checkClock(*scratch, int) *masterClock { return t.clock }
func (t *oneMaster) settle(_ []call, failed error) error   { return failed }
func (t *oneMaster) shardName(int) string                  { return "" }

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

// route looks up the master of each slot the request's checks have, once
// per slot: the checks of a slot share a master. A check mapped to a
// master whose last call failed asks for a slot map reload, so that a
// promoted replica is found while the failed master's breaker keeps its
// requests away from Redis.
func (t *cluster) route(s *scratch) {
	for i, slot := range s.slots {
		var n *node
		if j := slices.Index(s.slots[:i], slot); j >= 0 {
			n = s.nodes[j]
		} else {
			// Any window's hash has the counter's slot
			// (AppendCounterHash): the key of window 0 finds the master.
			n = t.nodes.forKey(s.keys.view(i))
			if n.failing.Load() {
				t.nodes.reload()
			}
		}
		s.nodes = append(s.nodes, n)
	}
}

func (t *cluster) roundTrip(ctx context.Context, s *scratch, calls []*call) error {
	if t.nodes.newBatch == nil {
		// The calls may go to several masters: no one clock to measure.
		return t.b.roundTripVia(ctx, s, calls, nil, nil)
	}
	return roundTripNodes(ctx, s, calls)
}

func (t *cluster) clockOf(key string) *masterClock { return t.nodes.forKey(key).clock }

func (t *cluster) checkClock(s *scratch, i int) *masterClock { return s.nodes[i].clock }

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

func (t *cluster) shardName(id int) string { return t.nodes.name(id) }
func (t *cluster) close()                  { t.nodes.close() }
func (t *cluster) poster(n *node) *batcher { return n.backs }
