package warmup

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// anchorScript gets or sets one anchor in one atomic step, so that the
// first replica to ask sets it and every other reads that value.
//
// KEYS[1]: the anchor key (redisalgo.AppendAnchorKey).
// ARGV[1]: the anchor to restore in Unix µs, or "0" to take Redis TIME.
// ARGV[2]: the key's TTL in ms.
// Returns the stored anchor in Unix µs, as a string.
//
// The µs are built and kept as strings: a Lua number would pass through
// tostring's 14 significant digits on the way into SET and lose the
// microseconds of a 16-digit timestamp.
var anchorScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  v = ARGV[1]
  if v == '0' then
    local t = redis.call('TIME')
    v = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  end
  redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
  return v
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return v
`)

// RedisAnchors keeps anchors in Redis, the one clock and store every
// replica shares: standalone, Sentinel or Cluster, through the client
// pkg/redisclient builds.
type RedisAnchors struct {
	client redis.Scripter
	prefix string
}

// NewRedisAnchors returns anchors kept in client's Redis, each key after
// prefix (the deployment's --redis-key-prefix).
func NewRedisAnchors(client redis.Scripter, prefix string) *RedisAnchors {
	return &RedisAnchors{client: client, prefix: prefix}
}

// Key returns the Redis key of an anchor.
func (r *RedisAnchors) Key(domain, anchor string) string {
	return string(redisalgo.AppendAnchorKey([]byte(r.prefix), domain, anchor))
}

// Anchor implements Anchors.
func (r *RedisAnchors) Anchor(ctx context.Context, domain, anchor string, known time.Time, ttl time.Duration) (time.Time, error) {
	restore := "0"
	if !known.IsZero() {
		restore = strconv.FormatInt(known.UnixMicro(), 10)
	}
	v, err := anchorScript.Run(ctx, r.client, []string{r.Key(domain, anchor)}, restore, ttl.Milliseconds()).Text()
	if err != nil {
		return time.Time{}, fmt.Errorf("warmup: anchor %s: %w", anchor, err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, fmt.Errorf("warmup: anchor %s holds %q (want Unix microseconds)", anchor, v)
	}
	return time.UnixMicro(us), nil
}
