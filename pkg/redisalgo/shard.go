package redisalgo

// Shards (docs/architecture.md#failure-model: one breaker per master). On Redis
// Cluster every master serves its own slots, and a dead master must cost
// only its own keys. So the backend numbers the masters: Apply routes each
// request's checks to their masters once, from the keys it builds for the
// script calls, and asks the caller's shard gate (algo.ShardGate;
// pkg/failover's breakers) with those masters' numbers before it sends
// anything (Backend.route); it reports the masters whose calls failed
// (ShardError); and every master has its own batcher, so that a pipeline
// stuck on a dead master never delays a request for another one.
// Standalone Redis and Sentinel are one shard, 0.
//
// Why masters and not slot ranges: a breaker opens from failures, and a
// master's failures are all of its keys' failures, so its breaker opens as
// quickly as a single global one did; a range of 1/64 of the slots sees
// 1/64 of the traffic and would open that much later. Ranges also
// straddle masters (5461 slots each is no multiple of a power of two), so
// a dead master would take healthy keys down with it. And after a
// failover the slots map to the promoted replica, whose breaker is its
// own and closed: recovery waits only for the slot map, not for a
// cool-down and a probe, as a range breaker would. The cost is that
// numbers are given per address; a cluster whose nodes keep new
// addresses grows the table, so it is bounded by maxNodes, beyond which
// new addresses share shard 0.
//
// The slot map. While a master is down, its requests get the failure mode
// without reaching Redis, so no error would tell go-redis to reload the
// map when the replica is promoted, and its periodic reload comes once a
// minute. So a master is marked failing when a call to it fails (cleared
// when one succeeds), and a check routed to a failing master (before the
// shard gate refuses it) asks for a reload, at most every reloadEvery;
// go-redis coalesces those further (one reload at a time, 200 ms apart). The promoted replica is a new
// address with a closed breaker, so its keys pass as soon as the map
// names it.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// maxNodes bounds the shard numbers (pkg/failover accepts up to 4096).
	maxNodes = 1024
	// reloadEvery is the shortest time between two slot map reloads that
	// failing masters ask for.
	reloadEvery = 100 * time.Millisecond
)

// ShardError is Apply's error on Redis Cluster: Err is the first failed
// slot group's error and Shards the shards (the numbers the shard gate was
// asked with) whose calls failed. pkg/failover reads them through FailedShards to open only those
// shards' breakers.
type ShardError struct {
	Shards []int
	Err    error
}

func (e *ShardError) Error() string { return e.Err.Error() }

func (e *ShardError) Unwrap() error { return e.Err }

// FailedShards returns e.Shards.
func (e *ShardError) FailedShards() []int { return e.Shards }

// node is one cluster master, as known by its address.
type node struct {
	id   int
	addr string
	// batch shares pipelines between the requests for this node; nil
	// without batching. backs carries give-backs (plain.go): batch, or
	// without batching a batcher of its own.
	batch, backs *batcher
	// clock is the master's clock (clock.go), its TIME sent on the
	// master's own client; node 0's goes through the cluster client to
	// any master, until the slot map names the masters.
	clock *masterClock
	// failing is set when a call to the node fails and cleared when one
	// succeeds; while it is set, checks mapped to the node ask for a slot
	// map reload.
	failing atomic.Bool
}

// nodes numbers a cluster's masters and holds their batchers. Node 0 is
// every check's node until the client has a slot map, and the node of
// addresses beyond maxNodes.
type nodes struct {
	cluster  ClusterClient
	newBatch func(*masterClock) *batcher // nil without batching
	// newBacks makes a node's give-back batcher without batching.
	newBacks func(*masterClock) *batcher
	unknown  *node
	// mapped is set once a call succeeded: the client then has a slot map,
	// and MasterForKey answers from it without I/O.
	mapped     atomic.Bool
	byAddr     atomic.Pointer[map[string]*node]
	lastReload atomic.Int64 // Unix ns

	mu     sync.Mutex // serializes additions and close
	all    []*node    // by id
	closed bool
}

func newNodes(cluster ClusterClient, newBatch, newBacks func(*masterClock) *batcher) *nodes {
	ns := &nodes{cluster: cluster, newBatch: newBatch, newBacks: newBacks}
	ns.unknown = &node{id: 0, addr: "", clock: &masterClock{via: cluster}}
	ns.batchers(ns.unknown)
	ns.all = []*node{ns.unknown}
	ns.byAddr.Store(&map[string]*node{})
	return ns
}

// forKey returns the node that serves key's slot in the client's slot map.
func (ns *nodes) forKey(key string) *node {
	if !ns.mapped.Load() {
		// MasterForKey would load the map, with I/O, on the caller's path.
		return ns.unknown
	}
	c, err := ns.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return ns.unknown
	}
	addr := c.Options().Addr
	if n := (*ns.byAddr.Load())[addr]; n != nil {
		return n
	}
	return ns.add(addr, c)
}

// add returns the node of addr, whose client is c, numbering it if new.
func (ns *nodes) add(addr string, c *redis.Client) *node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	old := *ns.byAddr.Load()
	if n := old[addr]; n != nil {
		return n
	}
	if len(ns.all) >= maxNodes {
		return ns.unknown
	}
	n := &node{id: len(ns.all), addr: addr, clock: &masterClock{via: c}}
	ns.batchers(n)
	if ns.closed {
		n.closeBatchers()
	}
	ns.all = append(ns.all, n)
	m := make(map[string]*node, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[addr] = n
	ns.byAddr.Store(&m)
	return n
}

// name returns shard id's address, or "" for node 0 and unknown ids.
func (ns *nodes) name(id int) string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if id > 0 && id < len(ns.all) {
		return ns.all[id].addr
	}
	return ""
}

// reload asks go-redis to reload the slot map, at most every reloadEvery.
func (ns *nodes) reload() {
	now := time.Now().UnixNano()
	last := ns.lastReload.Load()
	if now-last < int64(reloadEvery) || !ns.lastReload.CompareAndSwap(last, now) {
		return
	}
	ns.cluster.ReloadState(context.Background())
}

// close closes every node's batcher, and those of nodes added later.
func (ns *nodes) close() {
	ns.mu.Lock()
	ns.closed = true
	all := slices.Clone(ns.all)
	ns.mu.Unlock()
	for _, n := range all {
		n.closeBatchers()
	}
}

// batchers gives n its request and give-back batchers.
func (ns *nodes) batchers(n *node) {
	if ns.newBatch != nil {
		n.batch = ns.newBatch(n.clock)
		n.backs = n.batch
		return
	}
	n.backs = ns.newBacks(n.clock)
}

func (n *node) closeBatchers() {
	if n.batch != nil {
		n.batch.close()
	}
	if n.backs != n.batch {
		n.backs.close()
	}
}

// ShardName returns the address of the master that shard id names on
// Redis Cluster, or "" (shard 0, and every shard elsewhere).
func (b *Backend) ShardName(id int) string { return b.topo.shardName(id) }

// noteResults marks the nodes of failed calls failing and those of
// successful calls not, and returns the failed calls' distinct shards.
// A call that failed because its caller gave up says nothing about its
// node.
func (ns *nodes) noteResults(calls []call) (failed []int) {
	ok := false
	for i := range calls {
		c := &calls[i]
		if c.node == nil {
			continue
		}
		if c.err == nil {
			ok = true
			if c.node.failing.Load() {
				c.node.failing.Store(false)
			}
			continue
		}
		if !errors.Is(c.err, context.Canceled) {
			c.node.failing.Store(true)
		}
		if !slices.Contains(failed, c.node.id) {
			failed = append(failed, c.node.id)
		}
	}
	if ok && !ns.mapped.Load() {
		ns.mapped.Store(true)
	}
	return failed
}

// nodeRun is one node's share of a round trip (see roundTripNodes).
type nodeRun struct {
	node      *node
	calls     []*scriptCall
	job       *job
	abandoned bool
	err       error
}

// roundTripNodes sends calls through each node's batcher: one job per
// node, all in flight at once, so that the request waits for its slowest
// node and no request waits for a node it does not use.
func roundTripNodes(ctx context.Context, s *scratch, calls []*call) error {
	runs := s.runs[:0]
	for _, c := range calls {
		k := slices.IndexFunc(runs, func(r nodeRun) bool { return r.node == c.node })
		if k < 0 {
			// Reuse the runs' call slices: the batcher copies a job's
			// calls when it takes the job, and never reads those of a job
			// abandoned before.
			runs = slices.Grow(runs, 1)[:len(runs)+1]
			k = len(runs) - 1
			runs[k] = nodeRun{node: c.node, calls: runs[k].calls[:0]}
		}
		runs[k].calls = append(runs[k].calls, c.script.queue())
	}
	for len(s.jobs) < len(runs) {
		s.jobs = append(s.jobs, newJob())
	}
	do := func(r *nodeRun) { r.abandoned, r.err = r.node.batch.do(ctx, r.job) }
	for k := range runs {
		runs[k].job = s.jobs[k]
		runs[k].job.calls = runs[k].calls
	}
	if len(runs) == 1 {
		do(&runs[0])
	} else {
		var wg sync.WaitGroup
		for k := 1; k < len(runs); k++ {
			wg.Go(func() { do(&runs[k]) })
		}
		do(&runs[0])
		wg.Wait()
	}
	var err error
	for k := range runs {
		r := &runs[k]
		if r.abandoned {
			// A flusher may still hold the job and write into its calls,
			// which live in s: neither may be reused, and a later round
			// trip of this request (a refund) needs a new job.
			s.lost = true
			s.jobs[k] = newJob()
		} else {
			r.job.calls = nil
		}
		if err == nil {
			err = r.err
		}
		clear(r.calls)
		r.node, r.job, r.calls = nil, nil, r.calls[:0]
	}
	s.runs = runs
	return err
}
