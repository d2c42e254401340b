package warmup

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// anchorScript gets or sets one anchor in one atomic step, so that the
// first replica to ask sets it and every other reads that value.
//
// KEYS[1]: the anchor key (redisalgo.AppendAnchorKey).
// ARGV[1]: the anchor to restore in Unix µs of Redis's clock, or "0" to
// take Redis TIME.
// ARGV[2]: the key's TTL in ms.
// Returns {the stored anchor, Redis TIME now}, both in Unix µs as strings:
// the second lets the caller read the anchor on its own clock.
//
// The µs are built and kept as strings: a Lua number would pass through
// tostring's 14 significant digits on the way into SET and lose the
// microseconds of a 16-digit timestamp.
var anchorScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local v = redis.call('GET', KEYS[1])
if not v then
  v = ARGV[1]
  if v == '0' then
    v = now
  end
  redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
  return {v, now}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {v, now}
`)

// RedisAnchors keeps anchors in Redis, the one clock and store every
// replica shares: standalone, Sentinel or Cluster, through the client
// pkg/redisclient builds.
//
// Anchors are Redis TIME, and requests are stamped by each replica's
// clock; a replica whose clock is off by δ would run the ramp δ early or
// late. So each call also reads Redis TIME and Anchor returns the anchor
// as this process's clock reads it, to within half a round trip.
type RedisAnchors struct {
	client redis.Scripter
	prefix string
	// skew is Redis's clock minus ours in µs, from the last call; it turns
	// a known anchor back into Redis's clock when one is restored.
	skew atomic.Int64
	// now is the local clock, time.Now unless a test shifts it.
	now func() time.Time
}

// NewRedisAnchors returns anchors kept in client's Redis, each key after
// prefix (the deployment's --redis-key-prefix).
func NewRedisAnchors(client redis.Scripter, prefix string) *RedisAnchors {
	return &RedisAnchors{client: client, prefix: prefix, now: time.Now}
}

// Key returns the Redis key of an anchor.
func (r *RedisAnchors) Key(domain, anchor string) string {
	return string(redisalgo.AppendAnchorKey([]byte(r.prefix), domain, anchor))
}

// Anchor implements Anchors; known and the result are on this process's
// clock.
func (r *RedisAnchors) Anchor(ctx context.Context, domain, anchor string, known time.Time, ttl time.Duration) (time.Time, error) {
	restore := "0"
	if !known.IsZero() {
		restore = strconv.FormatInt(known.UnixMicro()+r.skew.Load(), 10)
	}
	sent := r.now()
	v, err := anchorScript.Run(ctx, r.client, []string{r.Key(domain, anchor)}, restore, ttl.Milliseconds()).StringSlice()
	if err != nil {
		return time.Time{}, fmt.Errorf("warmup: anchor %s: %w", anchor, err)
	}
	got := r.now()
	if len(v) != 2 {
		return time.Time{}, fmt.Errorf("warmup: anchor %s: script returned %q (want the anchor and Redis TIME)", anchor, v)
	}
	us, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, fmt.Errorf("warmup: anchor %s holds %q (want Unix microseconds)", anchor, v[0])
	}
	redisNow, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("warmup: anchor %s: Redis TIME %q (want Unix microseconds)", anchor, v[1])
	}
	// Redis read its clock somewhere between sent and got: the midpoint
	// errs by at most half the round trip.
	mid := sent.UnixMicro() + got.Sub(sent).Microseconds()/2
	skew := redisNow - mid
	r.skew.Store(skew)
	return time.UnixMicro(us - skew), nil
}
