package redisalgo

// Plain calls: the common request, one fixed_window limit and one hit, as
// two plain Redis commands instead of a script call. A script call costs
// Redis several times the commands it runs (BENCHMARKS.md, issue 19: at
// 1000 requests/s an EVALSHA of a minimal script doing this work costs
// Redis 1.24× envoyproxy/ratelimit's INCRBY and EXPIRE together, and
// apply.lua's 2.9×). A fixed_window's key
// names its window and holds the count alone (AppendKeyAt), so
//
//	INCRBY <key> 1
//	PEXPIRE <key> <ms to the window's end>
//
// in one pipeline apply the hit: the count after INCRBY decides, as
// apply.lua would at the same now (the reply is made in its shape, so
// nothing after the round trip knows the difference). PEXPIRE sets the
// expiry apply.lua would set.
//
// A denied hit has been counted and is given back with DECRBY (giveBack),
// one more round trip on denials only. Until it is, the count is above
// the limit by the hits being given back; that denies nothing that would
// pass, because with one hit per plain call a hit is denied only when the
// window's admitted hits already reach the limit, and a window's admitted
// hits never fall but by a refund (a Redis Cluster request's other slot
// group or the per-second split denying, or a lease's return, each through
// the script). So every decision is the
// one apply.lua makes, exactly, never over-admitting; after a refund of a
// window that is also over its limit, hits may be denied until the
// give-backs land, one round trip later. More hits per call, or several
// limits (all or nothing), could deny what fits while a give-back is in
// flight: those go to the script.

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// plainCheck reports whether c can be a plain call: a check lean.lua
// takes (a consuming fixed_window with a positive limit and period and no
// burst) of one hit.
func plainCheck(c *algo.Check) bool { return c.Hits == 1 && leanCheck(c) }

// windowTTL is the PEXPIRE, in ms, of a fixed_window count at now: to its
// window's end and windowMargin beyond, rounded up (apply.lua's ttlMs of
// algo's expiry plus its windowMargin).
func windowTTL(period, now int64) int64 {
	return (windowLeft(period, now) + windowMargin(period) + 999) / 1000
}

// windowMargin is how much longer than its window a fixed window's key
// lives: a period, at most 5 s. Replicas place windows on Redis's clock as
// each tracks it (clock.go), so one may still count into a window after
// another's clock says it ended; were the key set to expire at the window's
// end by the one that runs ahead, the other would count into a fresh key
// and over-admit. A past window's key is not read again (its letters come
// round 676 windows later), so the margin costs only memory: at a period
// of a second a key lives up to two seconds, as envoyproxy/ratelimit's
// EXPIRE of a period after the last hit keeps its keys.
func windowMargin(period int64) int64 { return min(period, 5*algo.Second) }

// windowLeft is the µs from now to the end of its window of period.
func windowLeft(period, now int64) int64 {
	return (algo.WindowIndex(now, period)+1)*period - now
}

// plainCmds is one plain call's commands.
type plainCmds struct {
	incr *redis.IntCmd
	call *scriptCall
}

// The plain commands' constant arguments, boxed once.
var (
	argIncrBy  any = "incrby"
	argPExpire any = "pexpire"
	argOne     any = int64(1)
)

// addPlain adds c's INCRBY and PEXPIRE. The arguments point into c's key
// and ttl, which stay unchanged until the round trip is done.
func (m *merger) addPlain(ctx context.Context, c *scriptCall) {
	incr := redis.NewIntCmd(ctx, argIncrBy, &c.keys[0], argOne)
	exp := redis.NewBoolCmd(ctx, argPExpire, &c.keys[0], &c.ttl)
	m.cmds = append(m.cmds, incr, exp)
	m.plains = append(m.plains, plainCmds{incr: incr, call: c})
}

// split gives the call its reply as apply.lua's would be: its ints are
// appendApplyInts's for one check at a given now (-1, now, code, limit,
// period). A failed INCRBY is the call's error; a failed PEXPIRE only
// leaves the key to the next call's PEXPIRE.
func (p plainCmds) split() {
	c := p.call
	if err := p.incr.Err(); err != nil {
		c.err = err
		return
	}
	now, limit, period := c.ints[1], c.ints[3], c.ints[4]
	count, left := p.incr.Val(), windowLeft(period, now)
	r := &c.plainReply
	if count <= limit {
		*r = [...]int64{now, 1, 1, limit - count, left, 0, 0}
	} else {
		// Denied: the hit is given back (giveBack), and the window,
		// full already, reads as full.
		*r = [...]int64{now, 0, 0, 0, left, left, 0}
	}
	c.reply = r[:]
}

// giveBack takes back the hit of every denied plain call, with DECRBY and
// the PEXPIRE its INCRBY had (so that a key that expired in between dies at
// its window's end too), in one pipeline outside any batch: denials are
// rare where this path matters, and the deny cache in front keeps them so.
// A failure is logged: the window then under-admits by the hits not given
// back until it ends.
func (b *Backend) giveBack(ctx context.Context, calls []*call) {
	pipe := b.client.Pipeline()
	for _, c := range calls {
		sc := &c.script
		pipe.DecrBy(ctx, sc.keys[0], 1)
		pipe.PExpire(ctx, sc.keys[0], time.Duration(sc.ttl)*time.Millisecond)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		b.log.Warn("giving back a denied hit failed; its window under-admits by it until it ends", zap.Int("calls", len(calls)), zap.Error(err))
	}
}
