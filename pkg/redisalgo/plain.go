package redisalgo

// Plain calls: the common request, one fixed_window limit and one hit, as
// one plain Redis command instead of a script call. A script call costs
// Redis several times the commands it runs (BENCHMARKS.md, issue 19: at
// 1000 requests/s an EVALSHA of a minimal script doing this work costs
// Redis 1.24× envoyproxy/ratelimit's INCRBY and EXPIRE together, and
// apply.lua's 2.9×). A fixed window's counter is a field of a hash that
// names its window and holds counts alone (AppendCounterHash), so
//
//	HINCRBY <hash> <field> 1
//
// applies the hit: the count after HINCRBY decides, as apply.lua would at
// the same now (the reply is made in its shape, so nothing after the round
// trip knows the difference). The hash's expiry, the window's end and
// windowMargin, is the same for every counter in it, so it is not sent
// with every hit: this replica adds
//
//	PEXPIRE <hash> <ms to the window's end + windowMargin> NX
//
// to its first plain call to each hash in each window, and to its first
// call resendExpiry (a second) or more after the last it sent (expire.go);
// NX (Redis 7.0) leaves an expiry that another replica or a script set
// alone. A decision is therefore one command, plus at most one a second
// per hash and replica (BENCHMARKS.md).
//
// A denied hit has been counted and is given back (giveBack): not on the
// request's path, which is answered at once, but with the next pipeline to
// the same master (batcher.post), by giveBackLua, a conditional decrement:
// it takes one from a count above 0 and leaves anything else alone, so a
// give-back that lands after its hash expired, was evicted or its field
// was reset by a script's refund never makes a negative count nor a hash
// (HINCRBY keeps the hash's TTL). Until it lands, the count is above
// the limit by the hits being given back; that denies nothing that would
// pass, because with one hit per plain call a hit is denied only when the
// window's admitted hits already reach the limit, and a window's admitted
// hits never fall but by a refund (a Redis Cluster request's other slot
// group or the per-second split denying, or a lease's return, each through
// the script). So every decision is the one apply.lua makes, exactly,
// never over-admitting; after a refund of a window that is also over its
// limit, hits may be denied until the give-backs land, one round trip
// later. More hits per call, or several limits (all or nothing), could
// deny what fits while a give-back is in flight: those go to the script.
//
// The scripts read a stored count at or below 0 as 0 (no hits). A plain
// HINCRBY that returns 0 or less found such a count (none of ours writes
// one): the hit is then counted nowhere the scripts would see, so the call
// is made again through lean.lua (Backend.eval), which reads the count as
// apply.lua does and writes the window's true count over it.

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// plainCheck reports whether c can be a plain call: a check lean.lua
// takes (a consuming fixed_window with a positive limit and period and no
// burst) of one hit, or, but for its charge bit, such a check's charge
// (algo.Check.Charge) of any hits: HINCRBY counts a charge's hits whatever
// they find, which is what a charge is, and a denied charge is not given
// back.
func plainCheck(c *algo.Check) bool {
	code, _, _ := applyCode(c)
	return leanShaped(code&^codeCharge, c) && (c.Hits == 1 || c.Charge)
}

// windowTTL is the PEXPIRE, in ms, of a fixed window's hash at now: to its
// window's end and windowMargin beyond, rounded up (apply.lua's ttlMs of
// algo's expiry plus its windowMargin).
func windowTTL(period, now int64) int64 {
	return (windowLeft(period, now) + windowMargin(period) + 999) / 1000
}

// windowMargin is how much longer than its window a fixed window's hash
// lives: a period, at most 5 s. Replicas place windows on Redis's clock as
// each tracks it (clock.go), so one may still count into a window after
// another's clock says it ended; were the hash set to expire at the
// window's end by the one that runs ahead, the other would count into a
// fresh hash and over-admit. A past window's hash is not read again (its
// name comes round 36⁴ windows later), so the margin costs only memory: at
// a period of a second a hash lives up to two seconds, as
// envoyproxy/ratelimit's EXPIRE of a period after the last hit keeps its
// keys.
func windowMargin(period int64) int64 { return min(period, maxWindowMargin) }

// maxWindowMargin bounds windowMargin; the scripts get it written in
// (withConstants), so that it is defined here alone.
const maxWindowMargin = 5 * algo.Second

// windowLeft is the µs from now to the end of its window of period.
func windowLeft(period, now int64) int64 {
	return (algo.WindowIndex(now, period)+1)*period - now
}

// plainCmds is one plain call's commands: its HINCRBY, and its PEXPIRE …
// NX or nil.
type plainCmds struct {
	incr *redis.IntCmd
	exp  *redis.BoolCmd
	call *scriptCall
}

// The plain commands' constant arguments, boxed once.
var (
	argHIncrBy any = "hincrby"
	argPExpire any = "pexpire"
	argNX      any = "nx"
	argOne     any = int64(1)
)

// addPlain adds c's HINCRBY, and its PEXPIRE … NX when c.expire. The
// arguments point into c's hash, field and ttl, which stay unchanged until
// the round trip is done.
func (m *merger) addPlain(ctx context.Context, c *scriptCall) {
	hits := argOne
	if c.ints[2]&codeHits != 0 {
		// appendApplyInts's hits, after code, limit and period.
		hits = &c.ints[5]
	}
	incr := redis.NewIntCmd(ctx, argHIncrBy, &c.keys[0], &c.fields[0], hits)
	m.cmds = append(m.cmds, incr)
	var exp *redis.BoolCmd
	if c.expire {
		exp = redis.NewBoolCmd(ctx, argPExpire, &c.keys[0], &c.ttl, argNX)
		m.cmds = append(m.cmds, exp)
	}
	m.plains = append(m.plains, plainCmds{incr: incr, exp: exp, call: c})
}

// errNotCounted is a plain call's error when its HINCRBY found a count at or
// below 0 (see the package comment above): Backend.eval sends the call
// again through lean.lua instead of failing it.
var errNotCounted = errors.New("redisalgo: plain call found a count at or below 0")

// split gives the call its reply as apply.lua's would be: its ints are
// appendApplyInts's for one check at a given now (-1, now, code, limit,
// period). A failed HINCRBY is the call's error; a failed PEXPIRE only
// clears c.expired, so that the backend sends it again (expire.go).
func (p plainCmds) split() {
	c := p.call
	c.expired = p.exp != nil && p.exp.Err() == nil
	if err := p.incr.Err(); err != nil {
		c.err = err
		return
	}
	now, code, limit, period := c.ints[1], c.ints[2], c.ints[3], c.ints[4]
	count, left := p.incr.Val(), windowLeft(period, now)
	r := &c.plainReply
	switch {
	case count < 1:
		c.err = errNotCounted
		return
	case count <= limit:
		*r = [...]int64{now, 1, 1, limit - count, left, 0, 0}
	case code&codeCharge != 0:
		// A charge past the limit stays counted: the check-only
		// decision of the overdrawn window, denied (algo.Check.Charge).
		*r = [...]int64{now, 0, 0, limit - count, left, left, 0}
	default:
		// Denied: the hit is given back (giveBack), and the window reads
		// as it stood before it: full, or overdrawn by charges
		// (cost: charge) when the count before it was past the limit.
		*r = [...]int64{now, 0, 0, limit - count + 1, left, left, 0}
	}
	c.reply = r[:]
}

// giveBackLua takes one hit back from a fixed window's count (field
// ARGV[1] of hash KEYS[1]): from a count above 0 only, so that it never
// makes a negative count, and never a hash or a field (a missing one
// stays missing, and HINCRBY keeps the hash's TTL). It is sent whole
// (EVAL), since it is small and sent on denials only: no NOSCRIPT can
// fail it.
const giveBackLua = `local v = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if v and v > 0 then return redis.call('HINCRBY', KEYS[1], ARGV[1], -1) end
return 0`

var (
	argGiveBack any = giveBackLua
	argOneKey   any = 1
)

// backCmd is one give-back's command.
type backCmd struct {
	cmd  *redis.Cmd
	call *scriptCall
}

// addGiveBack adds c's giveBackLua call.
func (m *merger) addGiveBack(ctx context.Context, c *scriptCall) {
	cmd := redis.NewCmd(ctx, argEval, argGiveBack, argOneKey, &c.keys[0], &c.fields[0])
	cmd.SetFirstKeyPos(3)
	m.cmds = append(m.cmds, cmd)
	m.backs = append(m.backs, backCmd{cmd: cmd, call: c})
}

// giveBack takes back the hit of every denied plain call without waiting:
// each goes, as a giveBackLua call, with the next pipeline to its call's
// master (topology.poster). A failure is logged: the window then
// under-admits by the hits not given back until it ends.
func (b *Backend) giveBack(calls []*call) {
	for _, c := range calls {
		// The request's scratch is reused once Apply returns: the
		// give-back owns its key.
		back := &scriptCall{giveBack: true, slot: c.script.slot, keys: []string{strings.Clone(c.script.keys[0])}, fields: []string{strings.Clone(c.script.fields[0])}}
		j := newJob()
		j.calls = []*scriptCall{back}
		j.after = func() {
			if err := back.err; err != nil {
				b.log.Warn("giving back a denied hit failed; its window under-admits by it until it ends", zap.Error(err))
			}
			b.giveBacks.Done()
		}
		b.giveBacks.Add(1)
		if !b.topo.poster(c.node).post(j) {
			b.giveBacks.Done()
			b.log.Warn("a denied hit was not given back: the backend is closed; its window under-admits by it until it ends")
		}
	}
}
