package redisalgo

// Typed script calls and their merging
// (docs/architecture.md#batching-calls-in-flight). A request queues one
// scriptCall per slot group: the slot, the keys and the integer arguments,
// its cost, and where its reply goes; nothing is encoded yet. At flush,
// merge turns every run of queued calls that share a slot (on standalone
// Redis and Sentinel: all of them) into one EVALSHA carrying all their
// requests, built once from the typed calls, and split hands each call its
// share of the reply. apply.lua applies the requests in order, each all or
// nothing as if it had a script call of its own, so nothing but the cost
// changes: Redis runs one script, reads TIME once and parses one command
// per round trip instead of one per request, and the client encodes and
// decodes one command. That per-script overhead, not the socket work, is
// most of Redis's CPU per request once pipelines are shared.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// scriptCall is one apply.lua call as the batcher carries it. Its owner
// sets it (set) before queueing it and reads reply and err once the round
// trip that carried it is done; in between only a flusher touches it,
// reading the call and writing reply and err (merger.split). The keys and
// ints it points to must stay unchanged until then (see scratch).
type scriptCall struct {
	// slot is the hash slot of every key (0 unless cluster), computed
	// once by Backend.group; calls merge only within one slot.
	slot int
	// keys are KEYS, one per limit (a fixed window's is its hash); ints
	// are ARGV (appendApplyInts); fields, parallel to keys, are the fixed
	// windows' fields in their hashes ("" for other algorithms), which
	// follow a request's ints in ARGV; checks are the limits, which say
	// whose field is sent.
	keys   []string
	ints   []int64
	fields []string
	checks []algo.Check
	// cost is the summed algo.Check.Cost of the call's limits, which
	// bounds how many calls one merged command carries.
	cost int64
	// eval sends the call as EVAL with the script's source instead of
	// EVALSHA, after NOSCRIPT.
	eval bool
	// lean sends the call to lean.lua instead of apply.lua; the backend
	// sets it for a request's calls that leanChecks accepts.
	lean bool
	// plain sends the call as HINCRBY instead of a script (plain.go);
	// the backend sets it for a lone check that plainCheck accepts, and
	// expire when the hash's PEXPIRE … NX goes with it, ttl its ms.
	plain  bool
	expire bool
	ttl    int64
	// expired reports that a plain call's PEXPIRE … NX was sent and
	// answered (plainCmds.split).
	expired bool
	// giveBack sends the call as giveBackLua on its one key, taking back
	// a denied plain hit (plain.go); no one reads its reply.
	giveBack bool
	// plainReply holds a plain call's reply, made as apply.lua would have
	// made it (plain.go), which reply then views.
	plainReply [replyPerLimit + 2]int64

	// reply is the call's share of its command's reply (replySize of its
	// limits), or err the command's error.
	reply []int64
	err   error
}

// set makes sc the call of checks on keys and fields (one per check, in
// order), all in slot, evaluated at now (0 for the server's TIME). Its
// arguments are appended to ints, which it returns.
func (sc *scriptCall) set(ints []int64, slot int, keys, fields []string, now int64, checks []algo.Check) []int64 {
	start := len(ints)
	ints = appendApplyInts(ints, now, checks)
	var cost int64
	for i := range checks {
		cost += checks[i].Cost()
	}
	*sc = scriptCall{slot: slot, keys: keys, fields: fields, checks: checks, ints: ints[start:len(ints):len(ints)], cost: cost}
	return ints
}

// queue clears sc's previous result and returns sc, ready to be sent.
func (sc *scriptCall) queue() *scriptCall {
	sc.reply, sc.err, sc.expired = nil, nil, false
	return sc
}

// mergedCall is one command standing for calls.
type mergedCall struct {
	cmd   *redis.IntSliceCmd
	calls []*scriptCall
}

// merger holds one send's buffers; a pool keeps them, since sends run
// concurrently (inline callers, the flusher, overflow senders).
type merger struct {
	calls  []*scriptCall
	args   []any
	cmds   []redis.Cmder
	merged []mergedCall
	plains []plainCmds
	backs  []backCmd
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

// merge returns the commands for calls: a giveBackLua call per give-back
// and an HINCRBY (and, when the call carries it, a PEXPIRE … NX) per plain
// call (plain.go), then one script
// call per run of calls that share a slot, the eval flag and the script
// (lean or apply), each carrying calls whose summed cost stays within
// maxCost, so that no merged script holds Redis much longer than one
// request may (a call above maxCost goes alone). Calls keep their queue
// order within a command. After the round trip, split hands each call its
// share of the reply; the merger must not be reused before.
func (m *merger) merge(ctx context.Context, calls []*scriptCall, maxCost int64) []redis.Cmder {
	m.calls = append(m.calls[:0], calls...)
	byCommand := func(x, y *scriptCall) int {
		if x.giveBack != y.giveBack {
			// Give-backs first: they free what the hits after them
			// may use.
			if x.giveBack {
				return -1
			}
			return 1
		}
		if x.plain != y.plain {
			if x.plain {
				return -1
			}
			return 1
		}
		if x.eval != y.eval {
			if x.eval {
				return 1
			}
			return -1
		}
		if x.lean != y.lean {
			// Concurrent requests, so either order is one they may
			// have arrived in.
			if x.lean {
				return 1
			}
			return -1
		}
		return cmp.Compare(x.slot, y.slot)
	}
	if !slices.IsSortedFunc(m.calls, byCommand) {
		// Stable: requests of one slot keep their order in the command.
		slices.SortStableFunc(m.calls, byCommand)
	}
	m.args, m.cmds, m.merged, m.plains, m.backs = m.args[:0], m.cmds[:0], m.merged[:0], m.plains[:0], m.backs[:0]
	lo := 0
	var cost int64
	for i, c := range m.calls {
		if c.giveBack {
			m.addGiveBack(ctx, c)
			lo = i + 1
			continue
		}
		if c.plain {
			// Plain calls sort first and never merge: each is its own
			// HINCRBY.
			m.addPlain(ctx, c)
			lo = i + 1
			continue
		}
		cost += c.cost
		if i+1 < len(m.calls) {
			next := m.calls[i+1]
			if byCommand(c, next) == 0 && cost+next.cost <= maxCost {
				continue
			}
		}
		m.add(ctx, m.calls[lo:i+1])
		lo, cost = i+1, 0
	}
	return m.cmds
}

// The command names and scripts, boxed once: converting a string to an
// interface allocates unless it is a constant.
var (
	argEvalSHA any = "evalsha"
	argEval    any = "eval"
	argSHA     any = applyScript.Hash()
	argScript  any = applyLua
	argLeanSHA any = leanScript.Hash()
	argLean    any = leanLua
)

// add builds the one command of calls: every call's keys, then every
// call's arguments, in call order. The arguments point into the calls'
// keys and ints (*string, *int64), which go-redis writes without boxing
// each value into an interface.
func (m *merger) add(ctx context.Context, calls []*scriptCall) {
	name, script := argEvalSHA, argSHA
	switch {
	case calls[0].eval && calls[0].lean:
		name, script = argEval, argLean
	case calls[0].eval:
		name, script = argEval, argScript
	case calls[0].lean:
		script = argLeanSHA
	}
	start, keys := len(m.args), 0
	for _, c := range calls {
		keys += len(c.keys)
	}
	m.args = append(m.args, name, script, keys)
	for _, c := range calls {
		for i := range c.keys {
			m.args = append(m.args, &c.keys[i])
		}
	}
	for _, c := range calls {
		for i := range c.ints {
			m.args = append(m.args, &c.ints[i])
		}
		// A request's fields follow its ints (apply.lua's header).
		for i := range c.checks {
			if c.checks[i].Policy.KeyedWindow() {
				m.args = append(m.args, &c.fields[i])
			}
		}
	}
	// apply.lua replies with integers only, so an IntSliceCmd reads the
	// reply without boxing. Earlier commands' arguments stay valid when
	// an append moves m.args: they keep the old array.
	cmd := redis.NewIntSliceCmd(ctx, m.args[start:len(m.args):len(m.args)]...)
	// go-redis routes a cluster command by its first key.
	cmd.SetFirstKeyPos(3)
	m.cmds = append(m.cmds, cmd)
	m.merged = append(m.merged, mergedCall{cmd: cmd, calls: calls})
}

// split gives each call its share of its command's reply, in call order
// (replySize of its limits each), or the command's error, and clears the
// merger's references. A reply of the wrong length fails every call of a
// merged command; a lone call gets its reply whole, for parseApplyInts to
// report in detail.
func (m *merger) split() {
	for _, p := range m.plains {
		p.split()
	}
	for _, g := range m.backs {
		g.call.err = g.cmd.Err()
	}
	for _, mc := range m.merged {
		if err := mc.cmd.Err(); err != nil {
			for _, c := range mc.calls {
				c.err = err
			}
			continue
		}
		vals := mc.cmd.Val()
		if len(mc.calls) == 1 {
			mc.calls[0].reply = vals
			continue
		}
		want := 0
		for _, c := range mc.calls {
			want += replySize(len(c.keys))
		}
		if len(vals) != want {
			err := fmt.Errorf("%w: %d elements for %d merged requests, want %d", ErrBadReply, len(vals), len(mc.calls), want)
			for _, c := range mc.calls {
				c.err = err
			}
			continue
		}
		off := 0
		for _, c := range mc.calls {
			n := replySize(len(c.keys))
			c.reply = vals[off : off+n : off+n]
			off += n
		}
	}
	clear(m.calls)
	clear(m.args)
	clear(m.cmds)
	clear(m.merged)
	clear(m.plains)
	clear(m.backs)
	m.calls, m.args, m.cmds, m.merged, m.plains, m.backs = m.calls[:0], m.args[:0], m.cmds[:0], m.merged[:0], m.plains[:0], m.backs[:0]
}
