package redisalgo

// Merging script calls (DESIGN §6). The batcher puts concurrent requests'
// EVALSHAs in one pipeline; merge then turns every group of them that
// shares a hash slot (on standalone Redis and Sentinel: all of them) into
// one EVALSHA carrying all their requests. apply.lua applies them in order,
// each all or nothing as if it had a script call of its own, so nothing but
// the cost changes: Redis runs one script, reads TIME once and parses one
// command per round trip instead of one per request, and the client
// encodes and decodes one command. That per-script overhead, not the socket
// work, is most of Redis's CPU per request once pipelines are shared.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// mergedCall is one EVALSHA standing for parts, the requests' own commands.
type mergedCall struct {
	cmd   *redis.IntSliceCmd
	parts []*redis.IntSliceCmd
	sizes []int // sizes[i]: length of parts[i]'s share of the reply
}

// merger holds one send's merge buffers; a pool keeps them, since sends run
// concurrently (inline callers, the flusher, overflow senders).
type merger struct {
	cands []candidate
	out   []redis.Cmder
	args  []any
	calls []mergedCall
	parts []*redis.IntSliceCmd
	sizes []int
}

type candidate struct {
	cmd  *redis.IntSliceCmd
	slot int
	cost int64
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

// merge returns the commands to send for cmds: each group of apply.lua
// EVALSHAs that share a slot (cluster) or all of them (otherwise) replaced
// by merged EVALSHAs, each carrying requests whose summed cost
// (algo.Check.Cost) stays within maxCost, so that no merged script holds
// Redis much longer than one request may; every other command as it is.
// After the round trip, finish hands each merged call's result to its
// parts. The merger must not be reused before finish has run.
func (m *merger) merge(ctx context.Context, cmds []redis.Cmder, cluster bool, maxCost int64) []redis.Cmder {
	m.cands = m.cands[:0]
	m.out = m.out[:0]
	for _, c := range cmds {
		cmd, ok := c.(*redis.IntSliceCmd)
		if !ok || !isApplyEvalSHA(cmd) {
			m.out = append(m.out, c)
			continue
		}
		slot := 0
		if cluster {
			key := *cmd.Args()[3].(*string)
			slot = keySlot(unsafe.Slice(unsafe.StringData(key), len(key)))
		}
		m.cands = append(m.cands, candidate{cmd: cmd, slot: slot, cost: callCost(cmd)})
	}
	if len(m.cands) < 2 {
		if len(m.cands) == 1 {
			m.out = append(m.out, m.cands[0].cmd)
		}
		return m.out
	}
	if cluster {
		// Stable: requests of one slot keep their order in the merged call.
		slices.SortStableFunc(m.cands, func(x, y candidate) int { return x.slot - y.slot })
	}
	m.args = m.args[:0]
	m.calls = m.calls[:0]
	m.parts = m.parts[:0]
	m.sizes = m.sizes[:0]
	lo := 0
	var cost int64
	for i := range m.cands {
		cost += m.cands[i].cost
		if i+1 < len(m.cands) && m.cands[i+1].slot == m.cands[i].slot && cost+m.cands[i+1].cost <= maxCost {
			continue
		}
		group := m.cands[lo : i+1]
		lo, cost = i+1, 0
		if len(group) == 1 {
			m.out = append(m.out, group[0].cmd)
			continue
		}
		m.out = append(m.out, m.mergeGroup(ctx, group))
	}
	return m.out
}

// mergeGroup builds the EVALSHA carrying group: every part's keys, then
// every part's arguments, in part order. The arguments are the parts' own
// values (pointers into their callers' buffers, which outlive the send).
func (m *merger) mergeGroup(ctx context.Context, group []candidate) *redis.IntSliceCmd {
	start, firstPart := len(m.args), len(m.parts)
	keys := 0
	for _, c := range group {
		keys += c.cmd.Args()[2].(int)
	}
	m.args = append(m.args, argEvalSHA, argSHA, keys)
	for _, c := range group {
		args := c.cmd.Args()
		n := args[2].(int)
		m.args = append(m.args, args[3:3+n]...)
		m.parts = append(m.parts, c.cmd)
		m.sizes = append(m.sizes, replySize(n))
	}
	for _, c := range group {
		args := c.cmd.Args()
		m.args = append(m.args, args[3+args[2].(int):]...)
	}
	cmd := redis.NewIntSliceCmd(ctx, m.args[start:len(m.args):len(m.args)]...)
	cmd.SetFirstKeyPos(3)
	end := len(m.parts)
	m.calls = append(m.calls, mergedCall{cmd: cmd, parts: m.parts[firstPart:end:end], sizes: m.sizes[firstPart:end:end]})
	return cmd
}

// finish gives each part of each merged call its share of the reply, or the
// call's error, and clears the merger's references.
func (m *merger) finish() {
	for _, mc := range m.calls {
		if err := mc.cmd.Err(); err != nil {
			for _, p := range mc.parts {
				p.SetErr(err)
			}
			continue
		}
		vals, off := mc.cmd.Val(), 0
		want := 0
		for _, n := range mc.sizes {
			want += n
		}
		if len(vals) != want {
			err := fmt.Errorf("%w: %d elements for %d merged requests, want %d", ErrBadReply, len(vals), len(mc.parts), want)
			for _, p := range mc.parts {
				p.SetErr(err)
			}
			continue
		}
		for i, p := range mc.parts {
			n := mc.sizes[i]
			p.SetVal(vals[off : off+n : off+n])
			off += n
		}
	}
	clear(m.cands)
	clear(m.out)
	clear(m.args)
	clear(m.calls)
	clear(m.parts)
	m.calls = m.calls[:0]
	m.parts = m.parts[:0]
	m.sizes = m.sizes[:0]
}

// isApplyEvalSHA reports whether cmd is an EVALSHA of apply.lua as
// Backend.command builds it: its key count, then that many *string keys.
func isApplyEvalSHA(cmd *redis.IntSliceCmd) bool {
	args := cmd.Args()
	if len(args) < 4 || args[0] != argEvalSHA || args[1] != argSHA {
		return false
	}
	n, ok := args[2].(int)
	if !ok || n < 1 || 3+n > len(args) {
		return false
	}
	_, ok = args[3].(*string)
	return ok
}

// callCost is the summed algo.Check.Cost of the limits an apply.lua
// EVALSHA (as isApplyEvalSHA accepts it) carries, read back from its
// arguments: after the keys, per request now and its limit count, then per
// limit its algorithm, limit, period, burst, hits and mode. A call it
// cannot read costs math.MaxInt64, so it is never merged.
func callCost(cmd *redis.IntSliceCmd) int64 {
	args := cmd.Args()
	ints := args[3+args[2].(int):]
	var sum int64
	for len(ints) > 0 {
		count, ok := ints[min(1, len(ints)-1)].(*int64)
		if len(ints) < 2 || !ok || *count < 0 || *count > int64(len(ints)-2)/argsPerLimit {
			return math.MaxInt64
		}
		for i := range int(*count) {
			l := ints[2+i*argsPerLimit:]
			alg, aok := l[0].(*int64)
			limit, lok := l[1].(*int64)
			hits, hok := l[4].(*int64)
			if !aok || !lok || !hok {
				return math.MaxInt64
			}
			c := algo.Check{Policy: algo.Policy{Algorithm: algo.Algorithm(*alg), Limit: *limit}, Hits: *hits}
			sum += c.Cost()
		}
		ints = ints[2+int(*count)*argsPerLimit:]
	}
	return sum
}
