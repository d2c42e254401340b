package failover

// Shards. On Redis Cluster each master serves its own keys, and a dead
// master must not cost the others' keys anything: a single breaker opened
// by one master's timeouts answered every request with the failure mode.
// So the breaker is kept per shard, a number the primary gives each of its
// masters (Options.Routed), and a primary error counts against the shards
// it names (FailedShards) rather than against every shard of the request.
//
// The primary asks the breakers itself, through the request's gate
// (algo.ShardGate): it knows a request's shards only once it has built its
// keys, and asking then spares it building them a second time beforehand.
// It asks right before it sends, after the layers between (lease, deny
// cache) have answered what they could: a request they answer whole never
// asks, and is answered while its shards' breakers are open.
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
)

// MaxShards bounds the shard numbers a routed primary may ask the gate
// for, and so the breakers a Backend keeps.
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

// gate is one request's algo.ShardGate: the shards whose breakers let it
// through, with their done funcs, or the shard whose breaker refused it.
// Apply takes one from Backend.gates per request and releases it when it
// returns; the primary must not call it after that (algo.ShardGate).
type gate struct {
	b      *Backend
	shards []*shard
	dones  []func(error)
	// open is the shard whose breaker refused the request and openErr
	// what the request is told; bad, a shard number out of range.
	open    *shard
	openErr error
	bad     error
	// blamed is Apply's scratch for blame.
	blamed []bool
}

// AllowShards implements algo.ShardGate: it asks the breaker of each shard
// not asked yet for this request. When one refuses, the shards already let
// through learn nothing from the request, and it returns openErr.
func (g *gate) AllowShards(ids []int) error {
	for _, id := range ids {
		if err := g.allow(id); err != nil {
			return err
		}
	}
	return nil
}

// allow asks shard id's breaker, unless the request has it already.
func (g *gate) allow(id int) error {
	if g.open != nil {
		return g.openErr
	}
	if g.bad != nil {
		return g.bad
	}
	if id < 0 || id >= MaxShards {
		g.bad = fmt.Errorf("failover: the primary asked the shard gate for shard %d (want 0..%d)", id, MaxShards-1)
		g.forget()
		return g.bad
	}
	for _, sh := range g.shards {
		if sh.id == id {
			return nil
		}
	}
	sh := g.b.shards.get(id)
	// The breakers keep their own time (gobreaker reads the wall clock).
	sh.use(g.b.now().UnixMicro())
	done, err := sh.cb.Allow()
	if err != nil {
		// Open, or every half-open probe is already in flight.
		g.open, g.openErr = sh, g.b.openError(sh)
		g.forget()
		return g.openErr
	}
	g.shards, g.dones = append(g.shards, sh), append(g.dones, done)
	return nil
}

// forget tells the shards already let through that the request's outcome
// is not theirs (it never reached them), and drops them.
func (g *gate) forget() {
	for _, d := range g.dones {
		d(errNotThisShard)
	}
	clear(g.shards)
	clear(g.dones)
	g.shards, g.dones = g.shards[:0], g.dones[:0]
}

// release returns g to its pool, holding nothing of the request.
func (g *gate) release() {
	clear(g.shards)
	clear(g.dones)
	g.shards, g.dones, g.blamed = g.shards[:0], g.dones[:0], g.blamed[:0]
	g.open, g.openErr, g.bad = nil, nil, nil
	g.b.gates.Put(g)
}

// blame appends to dst, for each of a failed request's shards, whether err
// counts against it: the shards err names when the primary is routed and
// knows its shards, every shard otherwise. The gate asked for exactly the
// shards the primary sent to, so a shard err does not name did not fail.
func (b *Backend) blame(err error, shards []*shard, dst []bool) []bool {
	var sf shardFailure
	if !b.routed || !errors.As(err, &sf) {
		for range shards {
			dst = append(dst, true)
		}
		return dst
	}
	failed := sf.FailedShards()
	for _, sh := range shards {
		dst = append(dst, slices.Contains(failed, sh.id))
	}
	return dst
}

// active returns the shards that State, Ping and the metrics describe:
// with one shard, that one; with several, those that saw a request within
// idleCooldowns cool-downs.
func (b *Backend) active() []*shard {
	all := b.shards.all()
	if !b.routed {
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
