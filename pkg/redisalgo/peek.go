package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Peek reads the state of each check's counter without changing it, for
// tools (the live explain endpoint): one pipeline of GET (HGET of its field
// in its hash for a fixed window, ZRANGE for a sliding log) and PTTL per
// key, and TIME for the time to judge the state
// at (the time the script would use; the caller's at under
// Options.CallerTime). A fixed window's hash is its current window's, on
// Redis's clock as the backend tracks it (clock.go), and that is the time
// its state is judged at. It never calls the script and sends no command that
// writes, so a peek consumes nothing and moves no expiry. On a cluster each
// key's commands go to its master.
func (b *Backend) Peek(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Peeked, error) {
	// The now fixed windows' keys are at; 0: none, judge at TIME.
	keyed, err := b.requestNow(ctx, at, checks)
	if err != nil {
		return nil, fmt.Errorf("redisalgo: peek: %w", err)
	}
	pipe := b.client.Pipeline()
	var clock *redis.TimeCmd
	if keyed == 0 {
		clock = pipe.Time(ctx)
	}
	out := make([]algo.Peeked, len(checks))
	values := make([]redis.Cmder, len(checks))
	ttls := make([]*redis.DurationCmd, len(checks))
	for i := range checks {
		key, field := CounterAt(b.keyPrefix, checks[i], keyed, b.counterHashes)
		out[i].Key, out[i].Field = key, field
		switch {
		case checks[i].Policy.KeyedWindow():
			values[i] = pipe.HGet(ctx, key, field)
		case isLog(checks[i].Policy.Algorithm):
			values[i] = pipe.ZRangeWithScores(ctx, key, 0, -1)
		default:
			values[i] = pipe.Get(ctx, key)
		}
		ttls[i] = pipe.PTTL(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisalgo: peek: %w", err)
	}
	now := keyed
	if clock != nil {
		now = clock.Val().UnixMicro()
	}
	for i := range checks {
		p := &out[i]
		p.Now, p.TTL = now, pttlMicros(ttls[i].Val())
		var err error
		switch v := values[i].(type) {
		case *redis.StringCmd:
			if v.Err() == nil {
				p.Exists = true
				p.State, err = DecodeState(checks[i].Policy, v.Val())
				if pol := checks[i].Policy; pol.KeyedWindow() && pol.Period > 0 {
					p.State.Time = algo.WindowIndex(now, pol.Period) * pol.Period
				}
			}
		case *redis.ZSliceCmd:
			p.Exists = len(v.Val()) > 0
			p.State = LogState(v.Val())
		}
		if err != nil {
			return nil, fmt.Errorf("redisalgo: peek %q: %w", p.Key, err)
		}
	}
	return out, nil
}

// pttlMicros converts a PTTL reply to algo.Peeked.TTL: -1 for a key
// without expiry, 0 for a missing key.
func pttlMicros(d time.Duration) int64 {
	switch {
	case d == -1:
		return -1
	case d < 0:
		return 0
	}
	return d.Microseconds()
}

// LogState is the algo.State of a sliding log read with ZRANGE … WITHSCORES:
// one entry per admitted hit, its score the hit's time (algo.DecodeLog).
func LogState(members []redis.Z) algo.State {
	if len(members) == 0 {
		return algo.State{}
	}
	times := make([]int64, len(members))
	for i, m := range members {
		times[i] = int64(m.Score)
	}
	return algo.DecodeLog(times)
}

// DecodeState reads a string state value that apply.lua wrote for a limit
// with policy p: algo.DecodeState, the algorithm table's codec. A sliding
// log is a sorted set: see LogState.
func DecodeState(p algo.Policy, v string) (algo.State, error) { return algo.DecodeState(p, v) }

// isLog reports whether a's state is a log, which Redis keeps as a sorted
// set rather than a string (algo.ShapeLog).
func isLog(a algo.Algorithm) bool {
	s, _ := a.Spec()
	return s.Shape == algo.ShapeLog
}
