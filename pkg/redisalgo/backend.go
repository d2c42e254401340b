// Package redisalgo is the Redis backend: it encodes each limit's Redis key
// (key.go), builds Redis clients from URLs (client.go), and applies a
// request's checks with one Lua script per hash-slot group, all groups in one
// pipeline (backend.go). The script (lua/apply.lua) and its Go argument and
// reply codec (script.go) mirror the pure cores of pkg/algo.
//
// It must not import pkg/rules, pkg/memstore, pkg/rls or anything that knows
// about gRPC; it depends on pkg/algo and go-redis only.
package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Options configures a Backend. The zero value is what production uses.
type Options struct {
	// Now, when set, is the time every script call evaluates at. Nil means
	// each Redis master's own TIME, so that the clocks of envoy-rls
	// replicas never matter. Only tests set it.
	Now func() time.Time
	// LazyLoad skips loading the script in New, so New does not contact
	// Redis; the first call then loads it through the NOSCRIPT path.
	LazyLoad bool
	// Logger receives warnings about failed refunds; nil means none.
	Logger *zap.Logger
}

// Backend applies checks on Redis (standalone, Sentinel or Cluster). It is
// safe for concurrent use.
type Backend struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is a cluster client
	now     func() time.Time
	log     *zap.Logger
	// exec sends cmds in one round trip and sets each cmd's result or
	// error. It is a field so that cross-request batching can replace it.
	exec func(ctx context.Context, cmds []redis.Cmder)
	bufs sync.Pool
	// noscript counts calls resent as EVAL after NOSCRIPT.
	noscript atomic.Uint64
}

// New returns a Backend over client and, unless opts.LazyLoad, loads the
// script on the master or every cluster master, failing when Redis is
// unreachable.
func New(client redis.UniversalClient, opts Options) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redisalgo: New: nil client")
	}
	b := &Backend{client: client, now: opts.Now, log: opts.Logger}
	if b.log == nil {
		b.log = zap.NewNop()
	}
	b.log = b.log.Named("redisalgo")
	b.cluster, _ = client.(*redis.ClusterClient)
	b.exec = b.send
	b.bufs.New = func() any { return new(scratch) }
	if !opts.LazyLoad {
		if err := b.LoadScript(context.Background()); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// LoadScript loads the script with SCRIPT LOAD on the master, or on every
// master of a cluster, so that the first requests need no extra round
// trip. Apply does not depend on it: a node that lacks the script (after a
// restart, a failover to a replica or SCRIPT FLUSH) gets it with the retry.
func (b *Backend) LoadScript(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		sha, err := c.ScriptLoad(ctx, applyLua).Result()
		if err != nil {
			return err
		}
		if sha != applyScript.Hash() {
			return fmt.Errorf("server computed SHA1 %s, want %s", sha, applyScript.Hash())
		}
		return nil
	}
	var err error
	if b.cluster != nil {
		err = b.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, b.client)
	}
	if err != nil {
		return fmt.Errorf("redisalgo: load script: %w", err)
	}
	return nil
}

// Ping checks that Redis answers: every master of a cluster, else the
// (current) master. It is meant for readiness probes.
func (b *Backend) Ping(ctx context.Context) error {
	var err error
	if b.cluster != nil {
		err = b.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = b.client.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("redisalgo: ping: %w", err)
	}
	return nil
}

// call is one script invocation: checks (sharing a slot), their keys, and
// where their decisions go.
type call struct {
	keys   [][]byte
	checks []algo.Check
	out    []algo.Decision
	// now is the time to evaluate at, 0 for the server's TIME.
	now int64

	cmd *redis.Cmd
	// Results: the time the script evaluated at, whether it admitted every
	// check, or why it failed.
	evalNow int64
	allowed bool
	err     error
}

// scratch is the per-Apply working memory, pooled so that the steady state
// allocates little.
type scratch struct {
	keys   []byte // every key, back to back
	ends   []int  // ends[i]: end of check i's key in keys
	keyv   [][]byte
	order  []int // check indices grouped by slot
	slots  []int // slots[i]: slot of check i
	sorted []algo.Check
	out    []algo.Decision
	calls  []call
	cmds   []redis.Cmder
	args   []any
}

func (s *scratch) reset(n int) {
	s.keys = s.keys[:0]
	s.ends = s.ends[:0]
	clear(s.keyv)
	s.keyv = s.keyv[:0]
	s.order = s.order[:0]
	s.slots = s.slots[:0]
	clear(s.sorted)
	s.sorted = s.sorted[:0]
	s.out = slices.Grow(s.out[:0], n)[:n]
	clear(s.calls)
	s.calls = s.calls[:0]
	clear(s.cmds)
	s.cmds = s.cmds[:0]
	clear(s.args)
	s.args = s.args[:0]
}

// Apply applies checks all or nothing and returns one Decision per check,
// in order (the pkg/rls Backend contract).
//
// Checks whose keys share a hash slot run in one script call, atomically;
// on standalone Redis and Sentinel that is every check. All calls go in one
// pipeline, so a request costs one round trip. On a cluster, when a group
// denies, the groups that consumed are refunded with a second pipelined
// call, so a denied request consumes nothing; while the refund is in flight
// other requests may be under-admitted, never over-admitted. The refunded
// checks report the check-only decision of their restored state.
//
// An error means no decision could be made; what other groups consumed is
// refunded as far as Redis answers.
func (b *Backend) Apply(ctx context.Context, checks []algo.Check) ([]algo.Decision, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	s := b.bufs.Get().(*scratch)
	defer b.bufs.Put(s)
	s.reset(len(checks))

	var now int64
	if b.now != nil {
		now = b.now().UnixMicro()
	}
	b.group(s, checks, now)
	b.eval(ctx, s, s.calls)

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
	if failed != nil {
		if b.cluster != nil {
			// A dead or demoted master keeps failing until the slot map is
			// refreshed; ask for that now instead of at the next periodic
			// reload.
			b.cluster.ReloadState(ctx)
		}
		return nil, failed
	}
	out := make([]algo.Decision, len(checks))
	for j, i := range s.order {
		out[i] = s.out[j]
	}
	return out, nil
}

// group computes each check's key and slot, orders the checks into slot
// groups (one group unless the client is a cluster client) and makes one
// call per group.
func (b *Backend) group(s *scratch, checks []algo.Check, now int64) {
	for i := range checks {
		s.keys = AppendKey(s.keys, checks[i])
		s.ends = append(s.ends, len(s.keys))
		slot := 0
		if b.cluster != nil {
			start := 0
			if i > 0 {
				start = s.ends[i-1]
			}
			slot = keySlot(s.keys[start:])
		}
		s.slots = append(s.slots, slot)
		s.order = append(s.order, i)
	}
	if b.cluster != nil {
		// Stable, so checks keep their request order inside a group.
		slices.SortStableFunc(s.order, func(x, y int) int { return s.slots[x] - s.slots[y] })
	}
	for _, i := range s.order {
		start := 0
		if i > 0 {
			start = s.ends[i-1]
		}
		s.keyv = append(s.keyv, s.keys[start:s.ends[i]])
		s.sorted = append(s.sorted, checks[i])
	}
	lo := 0
	for j, i := range s.order {
		if j+1 < len(s.order) && s.slots[s.order[j+1]] == s.slots[i] {
			continue
		}
		s.calls = append(s.calls, call{keys: s.keyv[lo : j+1], checks: s.sorted[lo : j+1], out: s.out[lo : j+1], now: now})
		lo = j + 1
	}
}

// eval runs calls in one round trip and records each one's outcome. Calls
// that fail with NOSCRIPT (the node restarted, was promoted from a replica,
// or had SCRIPT FLUSH) are resent once as EVAL with the script's source,
// which runs them and caches the script on that node in one round trip,
// whichever node the slot lives on now.
func (b *Backend) eval(ctx context.Context, s *scratch, calls []call) {
	s.cmds = s.cmds[:0]
	for i := range calls {
		c := &calls[i]
		c.cmd = b.command(ctx, s, "evalsha", applyScript.Hash(), c)
		s.cmds = append(s.cmds, c.cmd)
	}
	b.exec(ctx, s.cmds)

	s.cmds = s.cmds[:0]
	for i := range calls {
		c := &calls[i]
		if isNoScript(c.cmd.Err()) {
			c.cmd = b.command(ctx, s, "eval", applyLua, c)
			s.cmds = append(s.cmds, c.cmd)
		}
	}
	if len(s.cmds) > 0 {
		b.noscript.Add(uint64(len(s.cmds)))
		b.exec(ctx, s.cmds)
	}

	for i := range calls {
		c := &calls[i]
		if err := c.cmd.Err(); err != nil {
			c.err = fmt.Errorf("redisalgo: apply script: %w", err)
			continue
		}
		// parseApplyReply's errors carry the package prefix and the detail.
		c.evalNow, c.allowed, c.err = parseApplyReply(c.cmd.Val(), c.out)
	}
}

// command builds the EVALSHA (or EVAL) of c. Its arguments live in s.args;
// the keys are slices of s.keys, which go-redis writes as they are.
func (b *Backend) command(ctx context.Context, s *scratch, name, script string, c *call) *redis.Cmd {
	start := len(s.args)
	s.args = append(s.args, name, script, len(c.keys))
	for _, k := range c.keys {
		s.args = append(s.args, k)
	}
	s.args = appendApplyArgs(s.args, c.now, c.checks)
	cmd := redis.NewCmd(ctx, s.args[start:len(s.args):len(s.args)]...)
	// Route by the first key's slot without parsing the command.
	cmd.SetFirstKeyPos(3)
	return cmd
}

// refund gives back the hits of every call that admitted consuming checks,
// at the time that call evaluated at, and replaces those checks' decisions
// with the check-only decisions the refund returns. Failures are logged:
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
		r := call{now: c.evalNow}
		var idx []int
		for j, ch := range c.checks {
			if ch.Refund || ch.Hits <= 0 {
				continue
			}
			ch.Refund = true
			r.checks = append(r.checks, ch)
			r.keys = append(r.keys, c.keys[j])
			idx = append(idx, j)
		}
		if len(idx) == 0 {
			continue
		}
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

// send is the default exec: one command alone, several in one pipeline.
// Errors land in the commands.
func (b *Backend) send(ctx context.Context, cmds []redis.Cmder) {
	if len(cmds) == 1 {
		_ = b.client.Process(ctx, cmds[0])
		return
	}
	pipe := b.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c)
	}
	_, _ = pipe.Exec(ctx)
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
