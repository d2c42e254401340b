// Package shardmap is the striped map that the in-process layers in front
// of a backend (pkg/lease, pkg/denycache) keep their per-counter state in:
// Count maps, each behind its own lock, one chosen for a key by a seeded
// hash, so that requests on different counters rarely wait for each other.
//
// It only places keys. What the values mean, how many a shard may hold and
// which to evict stay with its users, who act under the shard's lock. It
// must not import any other package of envoy-rls.
package shardmap

import (
	"hash/maphash"
	"sync"
)

// Count is the number of shards in a Map.
const Count = 64

// Shard is one independently locked map. Its users hold Mu around every
// access to M.
type Shard[V any] struct {
	Mu sync.Mutex
	M  map[string]V
	_  [40]byte // keep neighbouring shard locks off one cache line
}

// Map is Count shards. The zero Map is not ready for use; call Init first.
// After Init, Index and Shard are safe for concurrent use.
type Map[V any] struct {
	seed   maphash.Seed
	shards [Count]Shard[V]
}

// Init seeds the hash and makes every shard's map.
func (m *Map[V]) Init() {
	m.seed = maphash.MakeSeed()
	for i := range m.shards {
		m.shards[i].M = make(map[string]V)
	}
}

// Index returns the number of the shard that holds key, for callers that
// compute it once and come back to the shard later.
func (m *Map[V]) Index(key []byte) int { return int(maphash.Bytes(m.seed, key) % Count) }

// IndexString is Index for a key held as a string (no copy to bytes).
func (m *Map[V]) IndexString(key string) int { return int(maphash.String(m.seed, key) % Count) }

// Shard returns shard i (0 ≤ i < Count).
func (m *Map[V]) Shard(i int) *Shard[V] { return &m.shards[i] }

// For returns the shard that holds key.
func (m *Map[V]) For(key []byte) *Shard[V] { return &m.shards[m.Index(key)] }
