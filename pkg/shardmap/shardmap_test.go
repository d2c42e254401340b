package shardmap

import (
	"fmt"
	"testing"
)

// TestPlacement: one key always lands on one shard, the one Index names,
// and many keys use most shards (a constant hash would put every counter
// behind one lock).
func TestPlacement(t *testing.T) {
	var m Map[int]
	m.Init()
	used := map[int]bool{}
	for i := range 1000 {
		key := []byte(fmt.Sprint("user-", i))
		idx := m.Index(key)
		if idx < 0 || idx >= Count {
			t.Fatalf("Index(%q) = %d, want 0 ≤ i < %d", key, idx, Count)
		}
		if m.For(key) != m.Shard(idx) || m.Index(key) != idx {
			t.Fatalf("key %q: For and Index disagree or change", key)
		}
		used[idx] = true
	}
	if len(used) < Count*3/4 {
		t.Errorf("1000 keys used %d of %d shards, want most", len(used), Count)
	}
	for i := range Count {
		if m.Shard(i).M == nil {
			t.Fatalf("shard %d has no map after Init", i)
		}
	}
}
