package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster timing. A short node timeout makes failure detection and
// promotion take a few seconds instead of the default 15+.
const (
	clusterNodeTimeout = 1500 * time.Millisecond
	// topologyTimeout bounds every wait for the cluster to settle.
	topologyTimeout = 60 * time.Second
)

// ClusterSet is a Redis Cluster of 3 masters with one replica each, made by
// redis-cli --cluster create. Roles change with Failover and KillMaster, so
// ask Masters, MasterForSlot or ReplicaOf for the current ones. Its helpers
// serialize topology changes; tests using them on a shared cluster must not
// run in parallel with other tests on it.
type ClusterSet struct {
	// Nodes are all six nodes in start order.
	Nodes []*Server
	// Addrs are the addresses of Nodes; any of them is a valid seed.
	Addrs []string

	changes serial
}

// StartCluster starts a cluster and waits until every node reports
// cluster_state:ok, all nodes agree on the slot owners and every replica is
// in sync. The caller must Close it. Use it from TestMain; tests use Cluster
// or SharedCluster.
//
// On a loaded machine a new cluster now and then fails to settle (a node
// misses the short node timeout while the cluster forms, and the roles
// never agree); it is then torn down and made again, up to
// clusterAttempts times.
func StartCluster() (*ClusterSet, error) {
	return startAttempts(clusterAttempts, func() (*ClusterSet, error) { return startSet(&ClusterSet{}, (*ClusterSet).start) })
}

// clusterAttempts bounds how often StartCluster makes a cluster anew.
const clusterAttempts = 3

// start launches the nodes, makes them a cluster and waits until it
// settles.
func (c *ClusterSet) start() error {
	_, cli, err := binaries()
	if err != nil {
		return err
	}
	c.Nodes, err = launchAll(6, "cluster", func(dir string, ports []int) ([]string, error) {
		return append(baseArgs(dir, ports[0]),
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(ports[1]),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())),
			// Replicas may always take over, however long the
			// master was gone, and stay where they were put.
			"--cluster-replica-validity-factor", "0",
			"--cluster-allow-replica-migration", "no",
			// Healthy masters keep serving their slots while a
			// failed master's are uncovered (until its replica
			// is promoted), as envoy-rls's README asks of
			// production clusters; by default Redis answers
			// CLUSTERDOWN for every key then.
			"--cluster-require-full-coverage", "no",
			"--repl-diskless-sync-delay", "0",
		), nil
	}, 2)
	if err != nil {
		return fmt.Errorf("redistest: cluster: %w", err)
	}
	c.Addrs = addrs(c.Nodes)

	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	return c.waitStable(true, nil)
}

// Cluster starts a cluster for this test and stops it at cleanup.
func Cluster(t testing.TB) *ClusterSet {
	t.Helper()
	return startForTest(t, StartCluster)
}

// Close kills every node. It is idempotent.
func (c *ClusterSet) Close() { closeAll(c.Nodes) }

// ClusterClient returns a cluster client seeded with every node, closed at
// the end of the test.
func (c *ClusterSet) ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Masters returns the current masters ordered by their first slot.
func (c *ClusterSet) Masters(t testing.TB) []*Server {
	t.Helper()
	var out []*Server
	for _, m := range c.mustTopology(t).masters() {
		out = append(out, c.node(m.addr))
	}
	return out
}

// MasterForSlot returns the node that currently serves slot.
func (c *ClusterSet) MasterForSlot(t testing.TB, slot int) *Server {
	t.Helper()
	return c.node(mustOwner(t, c.mustTopology(t), slot).addr)
}

// ReplicaOf returns a running replica of master, or fails the test.
func (c *ClusterSet) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	return c.mustReplica(t, c.mustTopology(t), master.Addr)
}

// shard returns the master serving slot, as the cluster sees it, and its
// running replica; the caller is inside c.changes.
func (c *ClusterSet) shard(t testing.TB, slot int) (master *clusterNode, replica *Server) {
	t.Helper()
	topo := c.mustTopology(t)
	master = mustOwner(t, topo, slot)
	return master, c.mustReplica(t, topo, master.addr)
}

// mustTopology is topology for the test helpers: a cluster no node answers
// for fails the test.
func (c *ClusterSet) mustTopology(t testing.TB) *topology {
	t.Helper()
	return must(t, c.topology)
}

// mustOwner returns the node topo says serves slot, or fails the test.
func mustOwner(t testing.TB, topo *topology, slot int) *clusterNode {
	t.Helper()
	m := topo.owner(slot)
	if m == nil {
		t.Fatalf("redistest: no node serves slot %d", slot)
	}
	return m
}

// mustReplica returns a running replica of masterAddr, or fails the test.
func (c *ClusterSet) mustReplica(t testing.TB, topo *topology, masterAddr string) *Server {
	t.Helper()
	r := c.replicaOf(topo, masterAddr)
	if r == nil {
		t.Fatalf("redistest: master %s has no running replica", masterAddr)
	}
	return r
}

// Failover promotes the replica of the master serving slot with CLUSTER
// FAILOVER (a coordinated, lossless failover) and waits until every node
// agrees and the old master is an in-sync replica. It returns the new master.
func (c *ClusterSet) Failover(t testing.TB, slot int) (promoted *Server) {
	t.Helper()
	c.changes.do(t, func() error {
		_, promoted = c.shard(t, slot)
		if err := command(promoted.Addr, "CLUSTER", "FAILOVER"); err != nil {
			return fmt.Errorf("redistest: CLUSTER FAILOVER on %s: %w", promoted.Addr, err)
		}
		return c.waitStable(true, func(tp *topology) bool { return ownerIs(tp, slot, promoted.Addr) })
	})
	return promoted
}

// KillMaster kills the master serving slot (SIGKILL) and waits until its
// replica was promoted and the cluster is ok again. It returns the killed
// node and the new master. The shard has no replica until Rejoin(killed).
func (c *ClusterSet) KillMaster(t testing.TB, slot int) (killed, promoted *Server) {
	t.Helper()
	c.changes.do(t, func() error {
		var m *clusterNode
		m, promoted = c.shard(t, slot)
		killed = c.node(m.addr)
		killed.Kill(t)
		return c.waitStable(false, func(tp *topology) bool { return ownerIs(tp, slot, promoted.Addr) })
	})
	return killed, promoted
}

// Rejoin starts a killed node again; it rejoins as a replica of the master
// that took over its slots. Rejoin waits until it is in sync.
func (c *ClusterSet) Rejoin(t testing.TB, node *Server) {
	t.Helper()
	c.changes.do(t, func() error {
		node.Start(t)
		return c.waitStable(true, nil)
	})
}

func (c *ClusterSet) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// replicaOf returns a running node that replicates masterAddr.
func (c *ClusterSet) replicaOf(topo *topology, masterAddr string) *Server {
	m := topo.byAddr(masterAddr)
	if m == nil {
		return nil
	}
	for _, n := range topo.nodes {
		if n.masterID == m.id && !n.failed() {
			if s := c.node(n.addr); s != nil && s.Running() {
				return s
			}
		}
	}
	return nil
}

// topology asks the first running node for CLUSTER NODES.
func (c *ClusterSet) topology() (*topology, error) {
	var last error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		topo, err := clusterNodes(n.Addr)
		if err == nil {
			return topo, nil
		}
		last = err
	}
	return nil, fmt.Errorf("redistest: cluster topology: no node answered: %v", last)
}

// waitStable waits until every running node reports cluster_state:ok, all of
// them describe the same roles and slot owners, every slot owner is running,
// every running replica has its replication link up, with replicas also
// every master has a running replica, and extra (if any) holds.
func (c *ClusterSet) waitStable(replicas bool, extra func(*topology) bool) error {
	if err := waitFor(func() error { return c.stable(replicas, extra) }); err != nil {
		return fmt.Errorf("redistest: cluster did not settle: %w", err)
	}
	return nil
}

func (c *ClusterSet) stable(replicas bool, extra func(*topology) bool) error {
	var first *topology
	var firstSig string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := commandString(n.Addr, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", n.Addr)
		}
		topo, err := clusterNodes(n.Addr)
		if err != nil {
			return err
		}
		sig, err := c.signature(topo)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		if first == nil {
			first, firstSig = topo, sig
		} else if sig != firstSig {
			return fmt.Errorf("nodes disagree:\n%s\nvs %s:\n%s", firstSig, n.Addr, sig)
		}
		if topo.self().masterID != "" {
			repl, err := commandString(n.Addr, "INFO", "replication")
			if err != nil {
				return err
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replication link not up", n.Addr)
			}
		}
	}
	if first == nil {
		return errors.New("no node running")
	}
	masters := first.masters()
	if len(masters) != 3 {
		return fmt.Errorf("%d masters own slots, want 3", len(masters))
	}
	if replicas {
		for _, m := range masters {
			if c.replicaOf(first, m.addr) == nil {
				return fmt.Errorf("master %s has no running replica", m.addr)
			}
		}
	}
	if extra != nil && !extra(first) {
		return errors.New("awaited change not visible yet")
	}
	return nil
}

// signature renders the running nodes' roles and slots as one node sees
// them, so views can be compared.
func (c *ClusterSet) signature(topo *topology) (string, error) {
	var lines []string
	for _, n := range topo.nodes {
		s := c.node(n.addr)
		if s == nil || !s.Running() {
			if len(n.slots) > 0 {
				return "", fmt.Errorf("slots served by stopped node %s", n.addr)
			}
			continue
		}
		if n.failed() {
			return "", fmt.Errorf("running node %s flagged %v", n.addr, n.flags)
		}
		master := "-"
		if m := topo.byID(n.masterID); m != nil {
			master = m.addr
		}
		lines = append(lines, fmt.Sprintf("%s master=%s slots=%v", n.addr, master, n.slots))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

func ownerIs(topo *topology, slot int, addr string) bool {
	m := topo.owner(slot)
	return m != nil && m.addr == addr
}

// topology is one node's CLUSTER NODES answer.
type topology struct {
	nodes []clusterNode
}

type clusterNode struct {
	id, addr string
	flags    []string
	masterID string // "" for a master
	slots    [][2]int
}

func (n *clusterNode) failed() bool {
	return slices.Contains(n.flags, "fail") || slices.Contains(n.flags, "fail?") || slices.Contains(n.flags, "noaddr")
}

func (tp *topology) self() *clusterNode {
	for i := range tp.nodes {
		if slices.Contains(tp.nodes[i].flags, "myself") {
			return &tp.nodes[i]
		}
	}
	return &clusterNode{}
}

func (tp *topology) byID(id string) *clusterNode {
	for i := range tp.nodes {
		if tp.nodes[i].id == id {
			return &tp.nodes[i]
		}
	}
	return nil
}

func (tp *topology) byAddr(addr string) *clusterNode {
	for i := range tp.nodes {
		if tp.nodes[i].addr == addr {
			return &tp.nodes[i]
		}
	}
	return nil
}

func (tp *topology) owner(slot int) *clusterNode {
	for i := range tp.nodes {
		for _, r := range tp.nodes[i].slots {
			if slot >= r[0] && slot <= r[1] {
				return &tp.nodes[i]
			}
		}
	}
	return nil
}

// masters returns the slot-owning nodes ordered by first slot.
func (tp *topology) masters() []*clusterNode {
	var out []*clusterNode
	for i := range tp.nodes {
		if len(tp.nodes[i].slots) > 0 {
			out = append(out, &tp.nodes[i])
		}
	}
	slices.SortFunc(out, func(a, b *clusterNode) int { return a.slots[0][0] - b.slots[0][0] })
	return out
}

// clusterNodes parses CLUSTER NODES:
// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
func clusterNodes(addr string) (*topology, error) {
	out, err := commandString(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	topo := &topology{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("redistest: %s: bad CLUSTER NODES line %q", addr, line)
		}
		n := clusterNode{id: f[0], flags: strings.Split(f[2], ",")}
		n.addr, _, _ = strings.Cut(f[1], "@")
		if f[3] != "-" {
			n.masterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: %s: bad slot %q in CLUSTER NODES", addr, s)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		topo.nodes = append(topo.nodes, n)
	}
	return topo, nil
}

// command sends one command to addr on a fresh connection without retries,
// so that polling never waits on a pool or a retry backoff.
func command(addr string, args ...any) error {
	_, err := do(addr, args...)
	return err
}

func commandString(addr string, args ...any) (string, error) {
	v, err := do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redistest: %s: %v answered %T, want string", addr, args, v)
	}
	return s, nil
}

func do(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   time.Second,
		ReadTimeout:   2 * time.Second,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      1,
		Protocol:      2,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: %v: %w", addr, args, err)
	}
	return v, nil
}

// LookupCounter is a real cluster client that counts the keys a backend
// looks the master of up (MasterForKey): each lookup is of a key the
// backend built for it, so tests count key builds and routings by it.
type LookupCounter struct {
	*redis.ClusterClient
	// Lookups is the number of MasterForKey calls so far.
	Lookups atomic.Int64
}

// MasterForKey counts the lookup and asks the cluster client.
func (c *LookupCounter) MasterForKey(ctx context.Context, key string) (*redis.Client, error) {
	c.Lookups.Add(1)
	return c.ClusterClient.MasterForKey(ctx, key)
}
