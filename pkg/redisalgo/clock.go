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
// The offset is measured again once the last measurement is older than
// clockMaxAge, by a TIME that the next pipeline carries (Backend.send), so
// keeping it costs one TIME a second. Of the measurements of the last
// clockMaxKeep, the one from the shortest round trip is used, as NTP
// does: a round trip slowed by a busy machine (a wait for a connection,
// the process descheduled) has a larger error, and one good measurement
// in ten seconds is enough, since clocks drift by microseconds in that
// time; a step of either clock is followed within clockMaxKeep.

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
// ones from slower round trips, and clockSamples how many are kept.
const (
	clockMaxAge  = time.Second
	clockMaxKeep = 10 * time.Second
	clockSamples = 10
)

// clockSample is one measurement: the offset, the round trip it came from
// and when it was taken (local, monotonic).
type clockSample struct {
	offset int64
	rtt    time.Duration
	at     time.Time
}

// redisClock is the offset of Redis's clock from the local one. It is safe
// for concurrent use; reading it (every request with a fixed window) takes
// no lock.
type redisClock struct {
	// cur is the reading in use; nil until the first measurement.
	cur atomic.Pointer[clockReading]
	// mu guards the samples: a ring of the last clockSamples, next its
	// next slot.
	mu      sync.Mutex
	samples [clockSamples]clockSample
	next    int
	// sampling is set while a pipeline carries a TIME, so that one at a
	// time does.
	sampling atomic.Bool
}

// clockReading is what the clock says: offset is Redis's time minus the
// local time, µs, from the kept sample with the shortest round trip;
// checked is when the last sample was taken, kept or not.
type clockReading struct {
	offset  int64
	checked time.Time
}

// now returns Redis's time (Unix µs) at the local time local, and whether
// the offset was ever measured (before, now is the local time).
func (c *redisClock) now(local time.Time) (now int64, ok bool) {
	r := c.cur.Load()
	if r == nil {
		return local.UnixMicro(), false
	}
	return local.UnixMicro() + r.offset, true
}

// stale reports whether the offset is due to be measured again at local:
// never measured, or last checked over clockMaxAge before.
func (c *redisClock) stale(local time.Time) bool {
	r := c.cur.Load()
	return r == nil || local.Sub(r.checked) > clockMaxAge
}

// observe records a TIME reply, redis, received in a round trip sent at
// sent and read at recv.
func (c *redisClock) observe(sent, recv time.Time, redis time.Time) {
	rtt := recv.Sub(sent)
	mid := sent.Add(rtt / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples[c.next] = clockSample{offset: redis.UnixMicro() - mid.UnixMicro(), rtt: rtt, at: recv}
	c.next = (c.next + 1) % clockSamples
	var best *clockSample
	for i := range c.samples {
		s := &c.samples[i]
		if s.at.IsZero() || recv.Sub(s.at) > clockMaxKeep {
			continue
		}
		if best == nil || s.rtt < best.rtt {
			best = s
		}
	}
	c.cur.Store(&clockReading{offset: best.offset, checked: recv})
}

// claim reports whether the caller should add a TIME to its pipeline: the
// offset is stale at local and no other pipeline carries one. A true claim
// must be followed by release.
func (c *redisClock) claim(local time.Time) bool {
	return c.stale(local) && c.sampling.CompareAndSwap(false, true)
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
