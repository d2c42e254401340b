package redistest

import (
	"context"
	"testing"
)

func TestSentinel(t *testing.T) {
	ctx := context.Background()
	s := SharedSentinel(t)
	c := s.FailoverClient(t)
	key := KeyPrefix(t) + "k"
	if err := c.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.Master(t)
	killed, promoted := s.KillMaster(t)
	if killed != old || promoted == old || s.Master(t) != promoted {
		t.Fatalf("KillMaster killed %s promoted %s, master now %s; old master %s", killed.Addr, promoted.Addr, s.Master(t).Addr, old.Addr)
	}
	// The failover client re-resolves the master through the sentinels.
	if err := c.Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	s.Rejoin(t, killed)
	if got, err := killed.Client(t).Get(ctx, key).Result(); err != nil || got != "v2" {
		t.Errorf("rejoined node GET = %q, %v; want v2 replicated", got, err)
	}
}
