package redistest

import (
	"context"
	"fmt"
	"testing"
)

// TestCluster exercises the shared cluster: every slot is served, keys on
// all masters can be written, a coordinated failover and a master kill both
// leave a working cluster behind.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	c := SharedCluster(t)
	cc := c.ClusterClient(t)
	p := KeyPrefix(t)

	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("Masters = %d nodes, want 3", len(masters))
	}
	seen := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("%s%d", p, i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		slot := int(cc.ClusterKeySlot(ctx, key).Val())
		seen[c.MasterForSlot(t, slot).Addr] = true
	}
	if len(seen) != 3 {
		t.Errorf("30 keys landed on %d masters, want 3", len(seen))
	}

	key := p + "failover"
	if err := cc.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot := int(cc.ClusterKeySlot(ctx, key).Val())
	old := c.MasterForSlot(t, slot)
	replica := c.ReplicaOf(t, old)
	promoted := c.Failover(t, slot)
	if promoted != replica || c.MasterForSlot(t, slot) != replica {
		t.Fatalf("after Failover slot %d served by %s, want former replica %s", slot, c.MasterForSlot(t, slot).Addr, replica.Addr)
	}
	if got, err := cc.Get(ctx, key).Result(); err != nil || got != "v1" {
		t.Errorf("GET after failover = %q, %v; want v1 (CLUSTER FAILOVER is lossless)", got, err)
	}
	if c.ReplicaOf(t, promoted) != old {
		t.Errorf("old master %s is not the new master's replica", old.Addr)
	}

	killed, promoted := c.KillMaster(t, slot)
	if killed != replica || promoted != old {
		t.Errorf("KillMaster killed %s promoted %s, want %s and %s", killed.Addr, promoted.Addr, replica.Addr, old.Addr)
	}
	// A client that knew the dead master keeps dialing it until its slot
	// map is refreshed; a fresh client sees the new owner at once.
	if err := c.ClusterClient(t).Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Errorf("SET after KillMaster: %v", err)
	}
	c.Rejoin(t, killed)
	if c.ReplicaOf(t, promoted) != killed {
		t.Errorf("rejoined %s is not a replica of %s", killed.Addr, promoted.Addr)
	}
}
