package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Peek reads the state of each check's counter without changing it, for
// tools (the live explain endpoint): one pipeline of GET (ZRANGE for a
// sliding log) and PTTL per key, and TIME for the time to judge the state
// at (the time the script would use; the caller's at under
// Options.CallerTime). It never calls the script and sends no command that
// writes, so a peek consumes nothing and moves no expiry. On a cluster each
// key's commands go to its master.
func (b *Backend) Peek(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Peeked, error) {
	pipe := b.client.Pipeline()
	var clock *redis.TimeCmd
	if !b.callerTime {
		clock = pipe.Time(ctx)
	}
	out := make([]algo.Peeked, len(checks))
	values := make([]redis.Cmder, len(checks))
	ttls := make([]*redis.DurationCmd, len(checks))
	for i := range checks {
		key := string(AppendKey([]byte(b.keyPrefix), checks[i]))
		out[i].Key = key
		if checks[i].Policy.Algorithm == algo.SlidingLog {
			values[i] = pipe.ZRangeWithScores(ctx, key, 0, -1)
		} else {
			values[i] = pipe.Get(ctx, key)
		}
		ttls[i] = pipe.PTTL(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisalgo: peek: %w", err)
	}
	now := at.UnixMicro()
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
// one entry per admitted hit, its score the hit's time.
func LogState(members []redis.Z) algo.State {
	if len(members) == 0 {
		return algo.State{}
	}
	log := make([]int64, len(members))
	for i, m := range members {
		log[i] = int64(m.Score)
	}
	return algo.State{Log: log}
}

// DecodeState reads a string state value that apply.lua wrote for a limit
// with policy p (only its Algorithm and Period matter): the inverse of its
// stateValue, as its load reads it (see the storage section of apply.lua's
// header). A sliding log is a sorted set: see LogState.
func DecodeState(p algo.Policy, v string) (algo.State, error) {
	if n := p.Windows(); n > 1 {
		return decodeSubWindows(v, p.Period, n)
	}
	switch p.Algorithm {
	case algo.FixedWindow, algo.SlidingWindow:
		start, c, prev, err := decodeWindow(v, p.Algorithm == algo.SlidingWindow)
		if err != nil {
			return algo.State{}, err
		}
		return algo.State{Time: start * p.Period, Count: c, Prev: prev}, nil
	case algo.TokenBucket, algo.GCRA:
		t, f, _, err := decodeFields(v, 2)
		return algo.State{Time: t, Frac: f}, err
	}
	return algo.State{}, fmt.Errorf("no string state for algorithm %s", p.Algorithm)
}

// decodeFields reads "<a>", "<a>:<b>" … up to n integers joined by ':'
// (apply.lua's loadFields); missing ones read as 0.
func decodeFields(v string, n int) (a, b, c int64, err error) {
	parts := strings.Split(v, ":")
	if len(parts) > n {
		return 0, 0, 0, fmt.Errorf("state %q has %d fields (want at most %d)", v, len(parts), n)
	}
	var out [3]int64
	for i, s := range parts {
		if s == "" && i > 0 {
			continue
		}
		if out[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("state %q: field %d is no integer", v, i)
		}
	}
	return out[0], out[1], out[2], nil
}

// decodeWindow reads a window value (apply.lua's loadWindow): the window
// index, its count and, for a sliding window, the previous count; packed,
// with the counts' digit counts at the end, or joined by ':'.
func decodeWindow(v string, sliding bool) (index, count, prev int64, err error) {
	if strings.Contains(v, ":") {
		n := 2
		if sliding {
			n = 3
		}
		return decodeFields(v, n)
	}
	bad := fmt.Errorf("window state %q is not packed as apply.lua packs it", v)
	n := len(v)
	digit := func() int {
		if n < 1 || v[n-1] < '0' || v[n-1] > '9' {
			return -1
		}
		n--
		return int(v[n] - '0')
	}
	take := func(d int) (int64, bool) {
		if d < 0 || d > n {
			return 0, false
		}
		s := v[n-d : n]
		n -= d
		if s == "" {
			return 0, true
		}
		x, err := strconv.ParseInt(s, 10, 64)
		return x, err == nil
	}
	np := 0
	if sliding {
		np = digit()
	}
	nc := digit()
	prev, okp := take(np)
	count, okc := take(nc)
	if !okp || !okc || n == 0 {
		return 0, 0, 0, bad
	}
	if index, err = strconv.ParseInt(v[:n], 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	return index, count, prev, nil
}
