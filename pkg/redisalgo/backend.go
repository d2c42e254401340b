// Package redisalgo is the Redis backend: it encodes each limit's Redis key
// (key.go) and applies a request's checks with one Lua script call per
// hash-slot group, all groups in one pipeline (backend.go), sharing
// pipelines between concurrent requests (batch.go) and merging their script
// calls into one EVALSHA per slot (merge.go). The script (lua/apply.lua)
// and its Go argument and reply codec (script.go) mirror the pure cores of
// pkg/algo; calls of plain fixed windows go to lua/lean.lua instead, which
// takes the same arguments and writes the same state at less Redis CPU
// (lean.go). On Redis Cluster it numbers the masters as shards, so that a
// caller can keep a circuit breaker per master, which it asks through the
// request's algo.ShardGate before sending, and batches per master
// (shard.go).
//
// It takes its Redis client through the small interfaces Client and
// ClusterClient, whichever New or NewCluster is given, and never builds,
// configures or closes clients (pkg/redisclient does). It must not import
// pkg/rules, pkg/memstore, pkg/rls or anything that knows about gRPC; it
// depends on pkg/algo and go-redis only.
package redisalgo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Options configures a Backend. The zero value is what production uses.
type Options struct {
	// CallerTime makes every call evaluate at the now its Apply is given.
	// False, the default, means the time algo.Applier states for Redis:
	// the master's TIME as tracked (clock.go) for a request with a fixed
	// window, the script's TIME for the others. Only tests set it.
	CallerTime bool
	// LazyLoad skips loading the script in New and NewCluster, so they do
	// not contact Redis; the first call then loads it through the
	// NOSCRIPT path.
	LazyLoad bool
	// Logger receives warnings about failed refunds; nil means none.
	Logger *zap.Logger
	// NoBatch sends each request's script calls in a pipeline of their own
	// instead of sharing pipelines across concurrent requests (batch.go).
	NoBatch bool
	// MaxBatch is the number of queued script calls at which a pipeline
	// leaves without waiting for the one in flight; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// BatchLinger, when positive, makes a request that finds nothing in
	// flight wait up to this long for others to share its pipeline and
	// script call, instead of leaving at once; at most MaxBatchLinger.
	// See batch.go for what it costs.
	BatchLinger time.Duration
	// MaxCallCost bounds the summed algo.Check.Cost of the requests one
	// merged script call carries; 0 means algo.DefaultMaxCost. A request
	// costing more than it runs alone (pkg/rls refuses such requests).
	MaxCallCost int64
	// Registerer receives the batch-size histogram
	// (envoy_rls_redis_batch_size); nil means no metrics.
	Registerer prometheus.Registerer
	// KeyPrefix goes before every key, so that several deployments (or
	// envoyproxy/ratelimit's CACHE_KEY_PREFIX users) can share one Redis.
	// It must not contain '{' or '}': Redis Cluster hashes the first
	// {...} of a key, so a brace here would move every key's hash tag
	// and split a limit's keys over slots.
	KeyPrefix string
	// CounterHashes is how many hashes the counters of one fixed-window
	// policy (domain, algorithm and period) spread over in each window
	// (AppendCounterHash); 0 means DefaultCounterHashes, at most
	// MaxCounterHashes. Every replica of a deployment must use the same
	// value: a counter's hash depends on it, so replicas with different
	// values count a counter apart (docs/redis.md, "Sizing counter
	// hashes").
	CounterHashes int
}

// ValidateCounterHashes checks an Options.CounterHashes: nil, or an error
// saying why it cannot be used.
func ValidateCounterHashes(n int) error {
	if n < 0 || n > MaxCounterHashes {
		return fmt.Errorf("redisalgo: counter hashes %d must be between 1 and %d (0: the default, %d)", n, MaxCounterHashes, DefaultCounterHashes)
	}
	return nil
}

// Client is what a Backend needs of a client of standalone Redis or of a
// Sentinel-managed master: *redis.Client, including the failover client
// redis.NewFailoverClient returns.
type Client interface {
	sender
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}

// ClusterClient is what a Backend needs of a Redis Cluster client
// (*redis.ClusterClient): sending, every master (to load the script and to
// ping), the master of a key and slot map reloads (shard.go).
type ClusterClient interface {
	sender
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

// sender sends the backend's commands: one alone, or several in a pipeline.
type sender interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// Backend applies checks on Redis (standalone, Sentinel or Cluster). It is
// safe for concurrent use.
type Backend struct {
	client sender
	// topo is oneMaster (New) or cluster (NewCluster): what differs
	// between them (topology.go).
	topo topology
	// callerTime is Options.CallerTime.
	callerTime bool
	log        *zap.Logger
	// sizes observes the calls per pipeline, roundTrips each pipeline's
	// duration; nil for none.
	sizes, roundTrips prometheus.Observer
	bufs              sync.Pool
	// noscript counts calls resent as EVAL after NOSCRIPT.
	noscript atomic.Uint64
	// maxCallCost is Options.MaxCallCost with its default.
	maxCallCost int64
	// keyPrefix is Options.KeyPrefix.
	keyPrefix string
	// counterHashes is Options.CounterHashes with its default.
	counterHashes int
	// expiries remembers which counter hashes this replica has set an
	// expiry on (expire.go).
	expiries expiries
	// clockUsed is set once a request needed a master's clock (clock.go),
	// from when pipelines keep their master's clock measured.
	clockUsed atomic.Bool
	// versionChecked is set once Ping has seen every master's version
	// (checkVersion).
	versionChecked atomic.Bool
	// giveBacks counts the give-backs posted and not yet done (plain.go),
	// so that tests can wait for them.
	giveBacks sync.WaitGroup
}

// New returns a Backend over a client of standalone Redis or of a Sentinel
// master, where every key of a request goes in one script call, and, unless
// opts.LazyLoad, loads the script, failing when Redis is unreachable.
//
// A Redis Cluster client needs NewCluster. New refuses a client that has
// the cluster methods (ClusterClient), wrapped or not: it would send keys
// of several hash slots in one script call, which Redis refuses with
// CROSSSLOT. Close the Backend before closing client.
func New(client Client, opts Options) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redisalgo: New: nil client")
	}
	if _, ok := client.(ClusterClient); ok {
		return nil, fmt.Errorf("redisalgo: New: %T is a Redis Cluster client; use NewCluster, which sends a request's keys in one script call per hash slot (with New, Redis would refuse keys of several slots with CROSSSLOT)", client)
	}
	b, err := newBase(client, opts)
	if err != nil {
		return nil, err
	}
	t := &oneMaster{b: b, client: client, clock: &masterClock{via: client, inline: true}}
	t.backs = b.newBatcher(opts, t.clock)
	if !opts.NoBatch {
		t.batch = t.backs
	}
	b.topo = t
	return b.start(opts)
}

// NewCluster returns a Backend over a Redis Cluster client: a request's
// keys go in one script call per hash slot, and each master has its own
// batcher and shard number (shard.go). Unless opts.LazyLoad, it loads the
// script on every master, failing when one is unreachable. Close the
// Backend before closing client.
func NewCluster(client ClusterClient, opts Options) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redisalgo: NewCluster: nil client")
	}
	b, err := newBase(client, opts)
	if err != nil {
		return nil, err
	}
	var newBatch func(*masterClock) *batcher
	if !opts.NoBatch {
		newBatch = func(mc *masterClock) *batcher { return b.newBatcher(opts, mc) }
	}
	newBacks := func(mc *masterClock) *batcher { return b.newBatcher(opts, mc) }
	b.topo = &cluster{b: b, client: client, nodes: newNodes(client, newBatch, newBacks)}
	return b.start(opts)
}

// newBase returns the parts of a Backend that New and NewCluster share.
func newBase(client sender, opts Options) (*Backend, error) {
	if opts.MaxCallCost < 0 {
		return nil, fmt.Errorf("redisalgo: MaxCallCost %d must be 0 (default) or positive", opts.MaxCallCost)
	}
	if err := ValidateKeyPrefix(opts.KeyPrefix); err != nil {
		return nil, err
	}
	if err := ValidateBatchLinger(opts.BatchLinger); err != nil {
		return nil, err
	}
	if err := ValidateCounterHashes(opts.CounterHashes); err != nil {
		return nil, err
	}
	b := &Backend{client: client, callerTime: opts.CallerTime, log: opts.Logger, maxCallCost: cmp.Or(opts.MaxCallCost, algo.DefaultMaxCost), keyPrefix: opts.KeyPrefix,
		counterHashes: cmp.Or(opts.CounterHashes, DefaultCounterHashes)}
	if b.log == nil {
		b.log = zap.NewNop()
	}
	b.log = b.log.Named("redisalgo")
	if opts.Registerer != nil {
		h, err := sharedHistogram(opts.Registerer, prometheus.HistogramOpts{
			Name:    "envoy_rls_redis_batch_size",
			Help:    "Requests' script calls (one per request and hash slot) per Redis round trip, before calls sharing a slot are merged into one.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		})
		if err != nil {
			return nil, fmt.Errorf("redisalgo: register metrics: %w", err)
		}
		rt, err := sharedHistogram(opts.Registerer, prometheus.HistogramOpts{
			Name:    "envoy_rls_redis_roundtrip_seconds",
			Help:    "Duration of each Redis pipeline (one or more requests' script calls), send to last reply.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		})
		if err != nil {
			return nil, fmt.Errorf("redisalgo: register metrics: %w", err)
		}
		b.sizes, b.roundTrips = h, rt
	}
	b.bufs.New = func() any { return &scratch{job: newJob()} }
	b.expiries.init()
	b.expiries.start()
	return b, nil
}

// newBatcher returns a batcher of pipelines to the master whose clock is
// mc.
func (b *Backend) newBatcher(opts Options, mc *masterClock) *batcher {
	bt := newBatcher(func(ctx context.Context, calls []*scriptCall) { b.send(ctx, calls, mc) }, opts.MaxBatch, b.sizes)
	bt.linger = opts.BatchLinger
	return bt
}

// start loads the script unless opts.LazyLoad.
func (b *Backend) start(opts Options) (*Backend, error) {
	if !opts.LazyLoad {
		if err := b.LoadScript(context.Background()); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// LoadScript loads the scripts (apply.lua, lean.lua) with SCRIPT LOAD on the master, or on every
// master of a cluster, so that the first requests need no extra round
// trip. Apply does not depend on it: a node that lacks the script (after a
// restart, a failover to a replica or SCRIPT FLUSH) gets it with the retry.
func (b *Backend) LoadScript(ctx context.Context) error {
	err := b.topo.forEachMaster(ctx, func(ctx context.Context, c master) error {
		for _, s := range []struct {
			src string
			sc  *redis.Script
		}{{applyLua, applyScript}, {leanLua, leanScript}} {
			sha, err := c.ScriptLoad(ctx, s.src).Result()
			if err != nil {
				return err
			}
			if sha != s.sc.Hash() {
				return fmt.Errorf("server computed SHA1 %s, want %s", sha, s.sc.Hash())
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisalgo: load script: %w", err)
	}
	b.topo.loaded()
	return nil
}

// Close waits for every queued and in-flight batch to finish; Apply fails
// with ErrClosed afterwards. It does not close the client.
func (b *Backend) Close() {
	b.topo.close()
	b.expiries.stop()
}

// Ping checks that Redis answers: every master of a cluster, else the
// (current) master. It is meant for readiness probes. Until it has seen
// every master's version once, it also checks that each is Redis 7.0 or
// later (checkVersion), so that a Redis too old is an unready replica with
// a log line that says why, not a failure at every request. Every ping
// also records the backend's counter-hash count for the deployment when
// none is, and fails when another is recorded (meta.go): a replica that
// would count apart from the others is an unready one.
func (b *Backend) Ping(ctx context.Context) error {
	checked := b.versionChecked.Load()
	err := b.topo.forEachMaster(ctx, func(ctx context.Context, m master) error {
		if err := m.Ping(ctx).Err(); err != nil {
			return err
		}
		if checked {
			return nil
		}
		return checkVersion(ctx, m)
	})
	if err != nil {
		return fmt.Errorf("redisalgo: ping: %w", err)
	}
	if !checked {
		b.versionChecked.Store(true)
	}
	// On every ping, not once: a count recorded anew (a planned change,
	// docs/redis.md) makes the replicas still on the old one unready.
	return b.checkCounterHashes(ctx)
}

// minRedisMajor is the oldest Redis the backend works with: PEXPIRE … NX,
// which sets a fixed window's hash expiry once per window (plain.go, the
// scripts), arrived in 7.0.
const minRedisMajor = 7

// ErrRedisTooOld is wrapped by the error for a master older than Redis
// 7.0.
var ErrRedisTooOld = errors.New("redis server older than 7.0")

// checkVersion fails when m reports a redis_version below minRedisMajor.
// A server whose INFO fails or names no version (a proxy, a managed
// service that hides it) passes: the commands then say for themselves.
func checkVersion(ctx context.Context, m master) error {
	info, err := m.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	return versionError(info)
}

// versionError is checkVersion's verdict on an INFO server reply.
func versionError(info string) error {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n < minRedisMajor {
			return fmt.Errorf("%w: the server reports %s; envoy-rls sets a fixed window's hash expiry with PEXPIRE … NX (7.0)", ErrRedisTooOld, v)
		}
		return nil
	}
	return nil
}

// call is one request's script call: its checks that share a slot, the
// typed call the batcher carries, and the outcome.
type call struct {
	script scriptCall
	checks []algo.Check
	out    []algo.Decision
	// node is the cluster master the call goes to; nil unless cluster.
	node *node
	// The outcome: the time the script evaluated at, whether it admitted
	// every check, or why it failed. Only the caller writes them, never a
	// flusher (see scriptCall).
	evalNow int64
	allowed bool
	err     error
}

// scratch is the per-Apply working memory, pooled so that the steady state
// allocates little. A scratch whose calls may still be queued or in flight
// is lost (never pooled again): a flusher may still read its keys and
// arguments and write into its calls.
type scratch struct {
	keys   keyBuf // every check's key, in request order
	order  []int  // check indices grouped by slot
	slots  []int  // slots[i]: slot of check i
	sorted []algo.Check
	// nows[i]: the time check i is applied at (requestNows), 0 for the
	// script's TIME; nodes[i], on a cluster, the master check i goes to
	// (route; else empty); shards the distinct shards of nodes, for the
	// shard gate; clocks pairs each master clock a request used with its
	// time.
	nows   []int64
	nodes  []*node
	shards []int
	clocks []clockNow
	out    []algo.Decision
	calls  []call
	// strs views the keys in keys, in order; ints holds every call's
	// arguments. Calls' keys and ints are slices of them, which the
	// merged command points into (merge.go) instead of boxing each value.
	strs []string
	ints []int64
	// flds views the fields of fixed windows' counters (keyBuf.field),
	// parallel to strs ("" for other algorithms).
	flds []string
	// sending holds the calls of one round trip; queued and runs carry
	// them to the batchers (roundTrip, roundTripNodes).
	sending []*call
	queued  []*scriptCall
	runs    []nodeRun
	jobs    []*job
	// job carries queued through the batcher. After an abandoned round
	// trip it is replaced: the batcher may still hold the old one.
	job  *job
	lost bool
}

func (s *scratch) reset(n int) {
	s.keys.reset()
	s.order = s.order[:0]
	s.slots = s.slots[:0]
	s.nows = s.nows[:0]
	clear(s.nodes)
	s.nodes = s.nodes[:0]
	clear(s.clocks)
	s.clocks = s.clocks[:0]
	clear(s.sorted)
	s.sorted = s.sorted[:0]
	s.out = slices.Grow(s.out[:0], n)[:n]
	clear(s.calls)
	s.calls = s.calls[:0]
	clear(s.strs)
	s.strs = s.strs[:0]
	clear(s.flds)
	s.flds = s.flds[:0]
	s.ints = s.ints[:0]
	clear(s.sending)
	s.sending = s.sending[:0]
	clear(s.queued)
	s.queued = s.queued[:0]
}

// Every backend layer implements the one contract.
var _ algo.Applier = (*Backend)(nil)

// Apply implements algo.Applier, whose comment states the contract.
//
// Checks whose keys share a hash slot run in one script call, atomically;
// on standalone Redis and Sentinel that is every check. All calls go in one
// pipeline, so a request costs one round trip. On a cluster, when a group
// denies, the groups that consumed are refunded with a second pipelined
// call, so a denied request consumes nothing; while the refund is in flight
// other requests may be under-admitted, never over-admitted. The refunded
// checks report the check-only decision of their restored state.
//
// When ctx carries an algo.ShardGate, Apply asks it once, with the
// request's distinct shards, after routing and before anything is sent
// (route); a refusal is returned, wrapped, with nothing sent.
//
// An error means no decision could be made; what other groups consumed is
// refunded as far as Redis answers.
func (b *Backend) Apply(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	// Two checks on one counter would be two writes of one key in one
	// script, the second losing the first's hits: apply them merged.
	if merged, owner := algo.Merge(checks); merged != nil {
		d, err := b.Apply(ctx, at, merged)
		if err != nil {
			return nil, err
		}
		out := make([]algo.Decision, len(checks))
		for i, j := range owner {
			out[i] = d[j]
		}
		return out, nil
	}
	s := b.bufs.Get().(*scratch)
	defer func() {
		if !s.lost {
			b.bufs.Put(s)
		}
	}()
	s.reset(len(checks))

	b.keys(s, checks)
	if err := b.route(ctx, s); err != nil {
		return nil, err
	}
	if err := b.requestNows(ctx, s, at, checks); err != nil {
		return nil, err
	}
	b.group(s, checks)
	b.eval(ctx, s, s.calls)
	if err := b.outcome(ctx, s); err != nil {
		return nil, err
	}
	out := make([]algo.Decision, len(checks))
	for j, i := range s.order {
		out[i] = s.out[j]
	}
	return out, nil
}

// route sets each check's master on a cluster (s.nodes), once per
// request: the node its slot group's call goes to, the clock its window is
// placed on, and the shard a caller's breaker is asked for are that one.
// Then, when ctx carries a shard gate (algo.ShardGate; pkg/failover puts
// its breakers there), it asks the gate with the request's distinct shards
// (0 off a cluster) before anything is sent, the master's clock included:
// a refused request sends and consumes nothing. Refunds and give-backs of
// the request do not come through here, so they are not asked again.
func (b *Backend) route(ctx context.Context, s *scratch) error {
	b.topo.route(s)
	g := algo.ShardGateOf(ctx)
	if g == nil {
		return nil
	}
	s.shards = s.shards[:0]
	if len(s.nodes) == 0 {
		s.shards = append(s.shards, 0)
	}
	for _, n := range s.nodes {
		if !slices.Contains(s.shards, n.id) {
			s.shards = append(s.shards, n.id)
		}
	}
	if err := g.AllowShards(s.shards); err != nil {
		return fmt.Errorf("redisalgo: shard gate: %w", err)
	}
	return nil
}

// clockNow is a master clock and the time a request is applied at on it.
type clockNow struct {
	clock *masterClock
	now   int64
}

// requestNows sets s.nows, the time each check is applied at: at under
// CallerTime; else, when a check's key names its window (the script cannot
// pick the window, since the key must be known before it runs), Redis's
// time on the clock of each check's master at the instant at, as tracked
// here (clock.go: at is from the caller's clock, placed on the monotonic
// one, and used only near the send); else 0, the script's own TIME. Every
// check on one master gets one time, so that a slot group's call has one.
// A refund that names the time its hits were decided at (algo.Check.At,
// from their Decision.At) is applied at that time, whatever at and the
// send are: placing at near a send that came long after (the per-second
// split refunds once the other Redis answered) could put it in the next
// window, giving back hits that window never had.
func (b *Backend) requestNows(ctx context.Context, s *scratch, at time.Time, checks []algo.Check) error {
	period := int64(0)
	if !b.callerTime {
		period = minKeyedPeriod(checks)
	}
	if period == 0 {
		var now int64
		if b.callerTime {
			now = at.UnixMicro()
		}
		for i := range checks {
			s.nows = append(s.nows, cmp.Or(checks[i].At, now))
		}
		return nil
	}
	b.useClocks()
	sent := time.Now()
	for i := range checks {
		mc := b.topo.checkClock(s, i)
		k := slices.IndexFunc(s.clocks, func(c clockNow) bool { return c.clock == mc })
		if k < 0 {
			now, err := checks[i].At, error(nil)
			if now == 0 {
				now, err = mc.at(ctx, at, sent, period)
			}
			if err != nil {
				return err
			}
			s.clocks = append(s.clocks, clockNow{mc, now})
			k = len(s.clocks) - 1
		}
		s.nows = append(s.nows, s.clocks[k].now)
	}
	return nil
}

// requestNow returns the one time a tool's read of checks (Peek) is at:
// as requestNows, on the clock of the first keyed check's master.
func (b *Backend) requestNow(ctx context.Context, at time.Time, checks []algo.Check) (int64, error) {
	period := minKeyedPeriod(checks)
	switch {
	case b.callerTime:
		return at.UnixMicro(), nil
	case period == 0:
		return 0, nil
	}
	b.useClocks()
	k := slices.IndexFunc(checks, func(c algo.Check) bool { return c.Policy.KeyedWindow() })
	buf := keyBufs.Get().(*keyBuf)
	defer keyBufs.Put(buf)
	buf.reset()
	// Any window's hash has the counter's slot (AppendCounterHash).
	buf.add(b.keyPrefix, checks[k], 0, b.counterHashes)
	mc := b.topo.clockOf(buf.view(0))
	return mc.at(ctx, at, time.Now(), period)
}

// keyBufs holds the key buffers of reads outside Apply (requestNow).
var keyBufs = sync.Pool{New: func() any { return new(keyBuf) }}

// useClocks records that requests need the masters' clocks, from when
// pipelines keep them measured.
func (b *Backend) useClocks() {
	if !b.clockUsed.Load() {
		// Stored once: a store on every request would move the flag's
		// cache line between CPUs.
		b.clockUsed.Store(true)
	}
}

// outcome returns the error of s's calls, if any, after refunding what a
// request that failed or was denied consumed in other slot groups.
func (b *Backend) outcome(ctx context.Context, s *scratch) error {
	allowed := true
	var failed error
	nfailed := 0
	for i := range s.calls {
		c := &s.calls[i]
		if c.err != nil {
			if nfailed == 0 {
				failed = c.err
			}
			nfailed++
		}
		allowed = allowed && c.allowed
	}
	if nfailed > 1 {
		failed = fmt.Errorf("%w (%d of %d slot groups failed)", failed, nfailed, len(s.calls))
	}
	if len(s.calls) > 1 && (failed != nil || !allowed) {
		// The refund must happen even when the request's deadline is what
		// failed a group; the client's own timeouts still bound it.
		b.refund(context.WithoutCancel(ctx), s)
	}
	return b.topo.settle(s.calls, failed)
}

// ValidateKeyPrefix checks an Options.KeyPrefix: nil, or an error saying
// why it cannot be used.
func ValidateKeyPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("redisalgo: key prefix %q contains '{' or '}', which would move the keys' Redis Cluster hash tag and split a limit's keys over slots", p)
	}
	return nil
}

// keys computes each check's key and slot once per request (the one slot
// computation: the merged commands group by it too): a fixed window's
// hash is named for window 0 here, since which window holds the request
// depends on its master's clock, found by the key (route, requestNows);
// group then writes the window's digits in place. A key, and a long
// part's SHA-256, is so built once per check, not once for the master,
// once for the window and once more for the caller's breaker (route asks
// the shard gate from these keys' masters).
func (b *Backend) keys(s *scratch, checks []algo.Check) {
	for i := range checks {
		key := s.keys.add(b.keyPrefix, checks[i], 0, b.counterHashes)
		// Any window's hash has the counter's slot (AppendCounterHash).
		s.slots = append(s.slots, b.topo.slot(key))
	}
}

// group names each fixed window's hash for its window at s.nows, orders
// the checks into slot groups (one group unless the backend is a
// cluster's) and makes one call per group.
func (b *Backend) group(s *scratch, checks []algo.Check) {
	for i := range checks {
		if checks[i].Policy.KeyedWindow() {
			s.keys.setWindow(i, checks[i].Policy, s.nows[i])
		}
		s.order = append(s.order, i)
	}
	b.topo.sortBySlot(s.order, s.slots)
	// The keys are complete: s.keys is not reset until s is reused, which
	// a lost scratch never is, so its views stay valid as long as any
	// flusher may read them (keyBuf).
	for _, i := range s.order {
		s.strs = append(s.strs, s.keys.view(i))
		s.flds = append(s.flds, s.keys.field(i))
		s.sorted = append(s.sorted, checks[i])
	}
	queueInOneSlot(s)
	lo := 0
	for j, i := range s.order {
		if j+1 < len(s.order) && s.slots[s.order[j+1]] == s.slots[i] {
			continue
		}
		c := call{checks: s.sorted[lo : j+1], out: s.out[lo : j+1]}
		now := s.nows[s.order[lo]]
		if len(s.nodes) > 0 {
			c.node = s.nodes[s.order[lo]]
		}
		s.ints = c.script.set(s.ints, s.slots[i], s.strs[lo:j+1], s.flds[lo:j+1], now, c.checks)
		c.script.lean = leanChecks(c.checks)
		if now != 0 && len(c.checks) == 1 && plainCheck(&c.checks[0]) {
			period := c.checks[0].Policy.Period
			c.script.plain, c.script.ttl = true, windowTTL(period, now)
			c.script.expire = b.expiries.need(c.script.keys[0], now+windowLeft(period, now), now)
		}
		s.calls = append(s.calls, c)
		lo = j + 1
	}
}

// eval runs calls in one round trip and records each one's outcome. Calls
// that fail with NOSCRIPT (the node restarted, was promoted from a replica,
// or had SCRIPT FLUSH) are resent once as EVAL with the script's source,
// which runs them and caches the script on that node in one round trip,
// whichever node the slot lives on now.
func (b *Backend) eval(ctx context.Context, s *scratch, calls []call) {
	s.sending = s.sending[:0]
	for i := range calls {
		s.sending = append(s.sending, &calls[i])
	}
	err := b.roundTrip(ctx, s, s.sending)
	for i := range calls {
		if sc := &calls[i].script; sc.expire && (err != nil || !sc.expired) {
			// Not known to have been applied: the next call sends it.
			b.expiries.forget(sc.keys[0])
		}
	}
	if err != nil {
		for i := range calls {
			calls[i].err = fmt.Errorf("redisalgo: apply script: %w", err)
		}
		return
	}

	s.sending = s.sending[:0]
	for i := range calls {
		c := &calls[i]
		switch {
		case isNoScript(c.script.err):
			c.script.eval = true
			s.sending = append(s.sending, c)
		case c.script.plain && errors.Is(c.script.err, errNotCounted):
			// A count at or below 0: lean.lua (apply.lua for a charge)
			// reads it as apply.lua does (plain.go), and EVAL cannot
			// meet NOSCRIPT.
			c.script.plain, c.script.lean, c.script.eval = false, leanChecks(c.checks), true
			s.sending = append(s.sending, c)
		}
	}
	if len(s.sending) > 0 {
		b.noscript.Add(uint64(len(s.sending)))
		if err := b.roundTrip(ctx, s, s.sending); err != nil {
			for _, c := range s.sending {
				c.err = fmt.Errorf("redisalgo: apply script: %w", err)
			}
			return
		}
	}

	s.sending = s.sending[:0]
	for i := range calls {
		c := &calls[i]
		if err := c.script.err; err != nil {
			what := "apply script"
			if c.script.plain {
				what = "plain call"
			}
			c.err = fmt.Errorf("redisalgo: %s: %w", what, err)
			continue
		}
		// parseApplyInts's errors carry the package prefix and the detail.
		c.evalNow, c.allowed, c.err = parseApplyInts(c.script.reply, c.out)
		for j := range c.out {
			// What a refund of these hits names (algo.Check.At).
			c.out[j].At = c.evalNow
		}
		if c.script.plain && c.err == nil && !c.allowed && c.script.ints[2]&codeCharge == 0 {
			s.sending = append(s.sending, c)
		}
	}
	if len(s.sending) > 0 {
		// Off the request's path: the request is answered now.
		b.giveBack(s.sending)
	}
}

// roundTrip sends calls in one round trip, as the topology routes them. An
// error means the calls' replies must not be read: the caller's ctx ended
// before they arrived (s is then lost when the calls may still be in
// flight) or the backend is closed.
func (b *Backend) roundTrip(ctx context.Context, s *scratch, calls []*call) error {
	return b.topo.roundTrip(ctx, s, calls)
}

// roundTripVia sends calls in one round trip through batch, or alone when
// batch is nil (Options.NoBatch).
func (b *Backend) roundTripVia(ctx context.Context, s *scratch, calls []*call, batch *batcher, mc *masterClock) error {
	s.queued = s.queued[:0]
	for _, c := range calls {
		s.queued = append(s.queued, c.script.queue())
	}
	if batch == nil {
		b.send(ctx, s.queued, mc)
		return nil
	}
	j := s.job
	j.calls = s.queued
	abandoned, err := batch.do(ctx, j)
	if abandoned {
		// A flusher may still read j and write into the calls, which
		// live in s: neither may be reused, and a later round trip of
		// this request (a refund) needs a job of its own.
		s.lost = true
		s.job = newJob()
		return err
	}
	j.calls = nil
	return err
}

// refund gives back the hits of every call that admitted consuming checks
// (but charges, which stay counted), at the time that call evaluated at,
// and replaces those checks' decisions with the check-only decisions the
// refund returns. Failures are logged:
// the request is answered anyway, and an unrefunded limit only
// under-admits until its state expires.
func (b *Backend) refund(ctx context.Context, s *scratch) {
	var refunds []call
	var from [][]int // from[k][m]: index in its call of refunds[k].checks[m]
	var src []*call
	for i := range s.calls {
		c := &s.calls[i]
		if !c.allowed || c.err != nil {
			continue
		}
		r := call{node: c.node}
		var keys, fields []string
		var idx []int
		for j, ch := range c.checks {
			// A charge stays counted whatever another slot group
			// decided (algo.Check.Charge).
			if ch.Refund || ch.Charge || ch.Hits <= 0 {
				continue
			}
			if ch.Take {
				// A take consumed what it was granted, not its Hits.
				ch.Hits, ch.Take = c.out[j].Granted, false
				if ch.Hits <= 0 {
					continue
				}
			}
			ch.Refund = true
			if d := c.out[j]; d.Delay > 0 {
				// A reservation is cancelled, never refunded (queue.go).
				ch.ReservedAt, ch.MaxDelay = d.ReservedAt, 0
			}
			r.checks = append(r.checks, ch)
			keys = append(keys, c.script.keys[j])
			fields = append(fields, c.script.fields[j])
			idx = append(idx, j)
		}
		if len(idx) == 0 {
			continue
		}
		s.ints = r.script.set(s.ints, c.script.slot, keys, fields, c.evalNow, r.checks)
		r.out = make([]algo.Decision, len(idx))
		refunds = append(refunds, r)
		from = append(from, idx)
		src = append(src, c)
	}
	if len(refunds) == 0 {
		return
	}
	b.eval(ctx, s, refunds)
	for k := range refunds {
		if err := refunds[k].err; err != nil {
			b.log.Warn("refund of a slot group failed; its limits under-admit until their state expires", zap.Error(err))
			continue
		}
		for m, j := range from[k] {
			src[k].out[j] = refunds[k].out[m]
		}
	}
}

// send runs calls in one round trip, as the fewest script calls: one
// EVALSHA (or EVAL) per run of calls that share a slot, within the cost
// cap (merge.go); one command alone, several in one pipeline. Each call
// gets its share of the reply, or its command's error. The calls go to
// one master, whose clock is mc (nil: calls to several masters, under
// Options.NoBatch on a cluster, and no clock measured here).
func (b *Backend) send(ctx context.Context, calls []*scriptCall, mc *masterClock) {
	if b.roundTrips != nil {
		defer func(start time.Time) { b.roundTrips.Observe(time.Since(start).Seconds()) }(time.Now())
	}
	m := mergers.Get().(*merger)
	defer mergers.Put(m)
	cmds := m.merge(ctx, calls, b.maxCallCost)
	if len(cmds) == 0 {
		return
	}
	// Keep the master's clock measured while requests need it: one
	// pipeline a second carries a TIME, or sends one beside it on the
	// master's own connection (clock.go).
	var tm *timeSample
	if mc != nil && b.clockUsed.Load() {
		if sent := time.Now(); mc.clock.claim(sent) {
			defer mc.clock.release()
			tm = &timeSample{cmd: redis.NewTimeCmd(ctx, "time"), sent: sent}
			if mc.inline {
				cmds = append(cmds, tm.cmd)
			} else {
				tm.done = make(chan struct{})
				go func() {
					defer close(tm.done)
					_ = mc.via.Process(ctx, tm.cmd)
					tm.recv = time.Now()
				}()
			}
		}
	}
	var err error
	switch len(cmds) {
	case 1:
		err = b.client.Process(ctx, cmds[0])
	default:
		pipe := b.client.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, err = pipe.Exec(ctx)
	}
	if tm != nil {
		if tm.done != nil {
			<-tm.done
		} else {
			tm.recv = time.Now()
		}
		if tm.cmd.Err() == nil {
			mc.clock.observe(tm.sent, tm.recv, tm.cmd.Val())
		}
	}
	var reply redis.Error
	if mc != nil && err != nil && !errors.As(err, &reply) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		// The connection failed: a failover may put a master with
		// another clock behind the address.
		mc.clock.invalidate()
	}
	m.split()
}

// timeSample is a TIME that a pipeline carries or sends beside it.
type timeSample struct {
	cmd        *redis.TimeCmd
	sent, recv time.Time
	done       chan struct{} // closed when a TIME sent beside is done
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
