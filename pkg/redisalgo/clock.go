package redisalgo

// Redis's clock, as a replica tracks it. A fixed_window's key names its
// window (AppendKeyAt), so the backend must know which window holds now
// before it sends anything: it cannot ask the script, which reads TIME
// only once it runs. It places windows on Redis's clock as tracked here:
// the offset between Redis's TIME and the local clock, measured with a
// TIME in a round trip, whose error is at most half that round trip (the
// reply was made between send and receive). Every replica tracks the same
// clock, so replicas agree on windows to within their round trips, where
// replicas' own clocks could disagree by seconds; and a window's count is
// exact whichever side of a boundary a hit lands.
//
// The offset is re-measured once it is older than clockMaxAge, by a TIME
// that the next pipeline carries (Backend.send), so keeping it costs one
// TIME a second. A measurement from a round trip over twice as long as the
// one in use is dropped, since its error may be that much larger, unless
// the one in use is older than clockMaxKeep: so a busy moment's slow round
// trip does not replace a good measurement, and a step of either clock is
// followed within clockMaxKeep.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockMaxAge is how long after a measurement the next pipeline measures
// the offset again; clockMaxKeep how long a measurement is kept against
// ones from slower round trips.
const (
	clockMaxAge  = time.Second
	clockMaxKeep = 10 * time.Second
)

// redisClock is the offset of Redis's clock from the local one. It is safe
// for concurrent use.
type redisClock struct {
	mu sync.Mutex
	// offset is Redis's time minus the local time, µs, measured at
	// measured (local, monotonic) in a round trip of rtt; checked is when
	// it was last measured again, kept or not; ok once one was.
	offset            int64
	rtt               time.Duration
	measured, checked time.Time
	ok                bool
	// sampling is set while a pipeline carries a TIME, so that one at a
	// time does.
	sampling atomic.Bool
}

// now returns Redis's time (Unix µs) at the local time local, whether the
// offset is due to be measured again (older than clockMaxAge, or never
// measured) and whether it ever was (before, now is the local time).
func (c *redisClock) now(local time.Time) (now int64, stale, ok bool) {
	c.mu.Lock()
	off, at, ok := c.offset, c.checked, c.ok
	c.mu.Unlock()
	return local.UnixMicro() + off, !ok || local.Sub(at) > clockMaxAge, ok
}

// observe records a TIME reply, redis, received in a round trip sent at
// sent and read at recv.
func (c *redisClock) observe(sent, recv time.Time, redis time.Time) {
	rtt := recv.Sub(sent)
	mid := sent.Add(rtt / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked = recv
	if c.ok && rtt > 2*c.rtt && recv.Sub(c.measured) <= clockMaxKeep {
		return
	}
	c.offset, c.rtt, c.measured, c.ok = redis.UnixMicro()-mid.UnixMicro(), rtt, recv, true
}

// claim reports whether the caller should add a TIME to its pipeline: the
// offset is stale and no other pipeline carries one. A true claim must be
// followed by release.
func (c *redisClock) claim(stale bool) bool {
	return stale && c.sampling.CompareAndSwap(false, true)
}

func (c *redisClock) release() { c.sampling.Store(false) }

// sync measures the offset with a TIME of its own on s, for a caller that
// needs Redis's time before any pipeline has measured it.
func (c *redisClock) sync(ctx context.Context, s sender) error {
	cmd := redis.NewTimeCmd(ctx, "time")
	sent := time.Now()
	if err := s.Process(ctx, cmd); err != nil {
		return fmt.Errorf("redisalgo: read Redis's clock: %w", err)
	}
	c.observe(sent, time.Now(), cmd.Val())
	return nil
}
