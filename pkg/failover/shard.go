package failover

// Shards. On Redis Cluster each master serves its own keys, and a dead
// master must not cost the others' keys anything: a single breaker opened
// by one master's timeouts answered every request with the failure mode.
// So the breaker is kept per shard, a number the primary gives each check
// (Options.Shard), and a primary error counts against the shards it names
// (FailedShards) rather than against every shard of the request.
//
// A request whose checks span shards asks each of their breakers: all must
// let it through, since the primary decides all or nothing. A shard that
// let it through but did not fail learns nothing from it (the request's
// outcome says nothing about that shard: errNotThisShard is excluded from
// its counts), and a half-open probe slot it took is given back.
//
// A shard that gets no more requests (a failed master whose slots moved to
// its promoted replica) would report its last state forever: open, then
// half-open with nobody to probe it. So State, Ping and the metrics leave
// out, when there are several shards, those idle for idleCooldowns
// cool-downs; a request that reaches such a shard again meets its breaker
// as it was left, probing first if it was not closed.

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sony/gobreaker/v2"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// MaxShards bounds the shard numbers Options.Shard may return, and so the
// breakers a Backend keeps.
const MaxShards = 1 << 12

// errNotThisShard marks, for one shard's breaker, a request outcome that
// says nothing about that shard: the request failed on another shard, or
// another shard's open breaker stopped it before it was sent.
var errNotThisShard = errors.New("failover: outcome belongs to another shard")

// shardFailure is implemented by primary errors that know which shards
// failed (pkg/redisalgo's ShardError).
type shardFailure interface {
	FailedShards() []int
}

// idleCooldowns is how many cool-downs without a request make a shard
// idle; see above.
const idleCooldowns = 10

// shard is one shard's breaker.
type shard struct {
	id int
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	// usedAt is when a request last reached this shard's breaker (Unix µs,
	// to within a second).
	usedAt atomic.Int64
	// openedAt is when the breaker last opened (Unix µs), 0 while closed.
	openedAt atomic.Int64
	// lastErr is the last error that counted as this shard's failure.
	lastErr atomic.Pointer[error]
}

func (sh *shard) state() State { return convState(sh.cb.State()) }

// use records a request at now (Unix µs). It writes at most once a second,
// so that requests on one shard do not all write one cache line.
func (sh *shard) use(now int64) {
	if now-sh.usedAt.Load() > 1e6 {
		sh.usedAt.Store(now)
	}
}

func (sh *shard) lastError() error {
	if p := sh.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// shardSet holds the shards by number, each made on first use. Lookups
// are lock-free: the slice is replaced, never changed, when a shard is
// added.
type shardSet struct {
	newShard func(id int) *shard
	list     atomic.Pointer[[]*shard]
	mu       sync.Mutex // serializes additions
}

// lookup returns shard id, or nil when it has not been made yet.
func (s *shardSet) lookup(id int) *shard {
	if p := s.list.Load(); p != nil && id < len(*p) {
		return (*p)[id]
	}
	return nil
}

// get returns shard id (0 ≤ id < MaxShards), making it if needed.
func (s *shardSet) get(id int) *shard {
	if sh := s.lookup(id); sh != nil {
		return sh
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []*shard
	if p := s.list.Load(); p != nil {
		old = *p
	}
	if id < len(old) && old[id] != nil {
		return old[id]
	}
	grown := make([]*shard, max(len(old), id+1))
	copy(grown, old)
	grown[id] = s.newShard(id)
	s.list.Store(&grown)
	return grown[id]
}

// all returns every shard made so far.
func (s *shardSet) all() []*shard {
	p := s.list.Load()
	if p == nil {
		return nil
	}
	out := make([]*shard, 0, len(*p))
	for _, sh := range *p {
		if sh != nil {
			out = append(out, sh)
		}
	}
	return out
}

// shardsOf appends to dst the distinct shards of checks, in order of first
// appearance.
func (b *Backend) shardsOf(checks []algo.Check, dst []*shard) ([]*shard, error) {
	if b.shardOf == nil {
		return append(dst, b.shards.get(0)), nil
	}
next:
	for _, c := range checks {
		id := b.shardOf(c)
		if id < 0 || id >= MaxShards {
			return nil, fmt.Errorf("failover: Options.Shard returned %d (want 0..%d)", id, MaxShards-1)
		}
		for _, sh := range dst {
			if sh.id == id {
				continue next
			}
		}
		dst = append(dst, b.shards.get(id))
	}
	return dst, nil
}

// blame reports, for each of a failed request's shards, whether err counts
// against it: the shards err names when the primary knows its shards,
// every shard otherwise. A request whose shards err does not name (the
// slot map changed between Shard and the call) blames none: the shard
// that failed did not let this request through.
func (b *Backend) blame(err error, shards []*shard) []bool {
	out := make([]bool, len(shards))
	var sf shardFailure
	if b.shardOf == nil || !errors.As(err, &sf) {
		for i := range out {
			out[i] = true
		}
		return out
	}
	failed := sf.FailedShards()
	for i, sh := range shards {
		out[i] = slices.Contains(failed, sh.id)
	}
	return out
}

// active returns the shards that State, Ping and the metrics describe:
// with one shard, that one; with several, those that saw a request within
// idleCooldowns cool-downs.
func (b *Backend) active() []*shard {
	all := b.shards.all()
	if b.shardOf == nil {
		return all
	}
	since := b.now().UnixMicro() - idleCooldowns*b.cooldown.Microseconds()
	out := all[:0]
	for _, sh := range all {
		if sh.usedAt.Load() >= since {
			out = append(out, sh)
		}
	}
	return out
}
