package redisalgo

// Redis's clock, as a replica tracks it, one per master. A fixed_window's
// hash names its window (AppendCounterHash), so the backend must know which
// window holds now before it sends anything: it cannot ask the script,
// which reads TIME only once it runs. It places windows on the clock of
// the master the key lives on, as tracked here: Redis's TIME read in a
// round trip on that master's own connection, anchored to the middle of
// the round trip on the local monotonic clock (its error is at most half
// the round trip: the reply was made between send and receive). Every
// replica tracks the same clocks, so replicas agree on windows to within
// their round trips, where their own clocks could disagree by seconds;
// and a window's count is exact whichever side of a boundary a hit lands.
//
// What the local clock may do, and why it does not move a window:
//
//   - The anchor is monotonic: Redis's time at a local instant is the
//     anchor's Redis time plus the monotonic time elapsed since it, so a
//     step of the local wall clock (an NTP step) moves nothing. A step is
//     still noticed, as the wall clock moving apart from the monotonic
//     one since the anchor by more than stepSlack, and the clock measured
//     again before a request is placed on it: the monotonic clock stops
//     while a VM is paused, where Redis's and the wall clock go on, so a
//     resumed VM's anchor lags. Such a measurement replaces the reading at
//     once (the local clocks say why it jumps) and drops the samples of
//     before.
//   - A request's instant (Apply's at) is used only while it is within
//     atSkew(period) of the send, on the tracked clock; else the request
//     is placed at the send. So a caller whose clock stepped, or a request
//     that waited long, never counts into a window that ended more than
//     the window's margin (windowMargin) before Redis's time, nor into one
//     that begins after its key would expire.
//   - A measurement whose offset jumps from the reading in use by more
//     than the two round trips' error (jumpSlack) is refused, and the
//     clock measured again at once: only a second measurement that agrees
//     with it replaces the reading (a step of Redis's clock, a Sentinel
//     failover to a host whose clock differs), and the samples of before
//     are dropped.
//   - No request is decided on a reading older than clockMaxUse: the
//     request measures the clock first (an idle replica pays one TIME,
//     which every request that finds the reading unusable while it is in
//     flight shares: masterClock.measureShared).
//     While requests flow, the next pipeline to the master carries a TIME
//     once the last measurement is older than clockMaxAge (Backend.send),
//     so keeping the clock costs one TIME a second per master; a failed
//     pipeline has the next one measure again.
//
// Of the measurements of the last clockMaxKeep, the one from the shortest
// round trip is used, as NTP does: a round trip slowed by a busy machine
// (a wait for a connection, the process descheduled) has a larger error,
// and clocks drift by microseconds in that time.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

const (
	// clockMaxAge is how long after a measurement the next pipeline
	// measures again; clockMaxUse how old a reading may be for a request
	// to be decided on it; clockMaxKeep how long a measurement is kept
	// against ones from slower round trips, and clockSamples how many are
	// kept.
	clockMaxAge  = time.Second
	clockMaxUse  = 3 * time.Second
	clockMaxKeep = 10 * time.Second
	clockSamples = 10
	// maxAtSkew bounds atSkew.
	maxAtSkew = 250 * time.Millisecond
	// jumpFloor is added to jumpSlack, for the clocks' resolution and
	// scheduling between reading the local clock and the socket.
	jumpFloor = 2 * time.Millisecond
	// stepSlack is how far the local wall clock may move apart from the
	// monotonic one before it counts as a step: far above NTP's slewing
	// (at most 500 ppm, 5 ms over clockMaxKeep).
	stepSlack = 100 * time.Millisecond
)

// atSkew is how far a request's instant may be from its send, on the
// tracked clock, and still place the request's windows: at most half the
// margin of the shortest period, so that a window it places has not ended
// more than the margin before the send, and its key, which expires the
// margin after the window's end, lives until the window's end on Redis's
// clock. periods is the fixed windows' shortest period.
func atSkew(period int64) int64 {
	return min(maxAtSkew.Microseconds(), windowMargin(period)/2)
}

// clockSample is one measurement: Redis's time, µs, at local, the middle
// of the round trip rtt that read it (local carries the monotonic clock;
// wall is its wall clock reading, µs).
type clockSample struct {
	redis int64
	local time.Time
	wall  int64
	rtt   time.Duration
}

// localStep reports whether the local wall clock, read as wall at t, has
// moved apart from the monotonic one since s by more than stepSlack.
func (s clockSample) localStep(t time.Time, wall int64) bool {
	return absDiff(wall-s.wall, t.Sub(s.local).Microseconds()) > stepSlack.Microseconds()
}

// offset is the sample's Redis time less its local time, µs, on the
// monotonic clock counted from base: comparable between samples.
func (s clockSample) offset(base time.Time) int64 {
	return s.redis - s.local.Sub(base).Microseconds()
}

// redisClock is one master's clock. It is safe for concurrent use; reading
// it (every request with a fixed window) takes no lock.
type redisClock struct {
	// cur is the reading in use; nil until the first measurement.
	cur atomic.Pointer[clockReading]
	// mu guards the samples: a ring of the last clockSamples, next its
	// next slot; refused is the last refused measurement, which the next
	// one may confirm; base anchors offsets.
	mu      sync.Mutex
	samples [clockSamples]clockSample
	next    int
	refused *clockSample
	base    time.Time
	// sampling is set while a TIME is in flight, so that one at a time is.
	sampling atomic.Bool
}

// clockReading is what the clock says: anchor is the sample in use (the
// kept one with the shortest round trip); checked is when the last
// measurement arrived, kept or not; suspect is set while a refused
// measurement waits to be confirmed or contradicted; due asks the next
// pipeline to measure (invalidate) without stopping requests using the
// reading.
type clockReading struct {
	anchor  clockSample
	checked time.Time
	suspect bool
	due     bool
}

// place returns the time a request whose instant is at, sent at sent,
// decides at on Redis's clock: at's, when it is within atSkew(period) of
// sent's, else sent's (see the package comment). ok is false when the
// reading may not be used: never measured, older than clockMaxUse at sent,
// suspect, or the local wall clock stepped since its anchor.
func (c *redisClock) place(at, sent time.Time, period int64) (now int64, ok bool) {
	return c.placeWall(at, sent, sent.UnixMicro(), period)
}

// placeWall is place with sent's wall clock reading given apart (tests
// step it).
func (c *redisClock) placeWall(at, sent time.Time, sentWall, period int64) (now int64, ok bool) {
	r := c.cur.Load()
	if r == nil || r.suspect || sent.Sub(r.checked) > clockMaxUse || r.anchor.localStep(sent, sentWall) {
		return 0, false
	}
	s := r.anchor.redis + sent.Sub(r.anchor.local).Microseconds()
	a := r.anchor.redis + at.Sub(r.anchor.local).Microseconds()
	if skew := atSkew(period); a < s-skew || a > s+skew {
		return s, true
	}
	return a, true
}

// stale reports whether the clock is due to be measured at local: never
// measured, suspect, or last checked over clockMaxAge before.
func (c *redisClock) stale(local time.Time) bool {
	r := c.cur.Load()
	return r == nil || r.suspect || r.due || local.Sub(r.checked) > clockMaxAge
}

// invalidate has the next pipeline measure the clock (after a failed one:
// a failover may have put a master with another clock behind the address,
// whose TIME the jump check then catches).
func (c *redisClock) invalidate() {
	if r := c.cur.Load(); r != nil && !r.due && !r.suspect {
		next := *r
		next.due = true
		c.cur.CompareAndSwap(r, &next)
	}
}

// jumpSlack is how far two measurements of rtts a and b may disagree
// without a step of either clock: their errors, half of each round trip,
// and jumpFloor.
func jumpSlack(a, b time.Duration) int64 { return ((a+b)/2 + jumpFloor).Microseconds() }

// observe records a TIME reply, redis, received in a round trip sent at
// sent and read at recv (both local, monotonic).
func (c *redisClock) observe(sent, recv time.Time, redis time.Time) {
	rtt := recv.Sub(sent)
	mid := sent.Add(rtt / 2)
	c.record(clockSample{redis: redis.UnixMicro(), local: mid, wall: mid.UnixMicro(), rtt: rtt}, recv)
}

// record records the measurement s, which arrived at recv.
func (c *redisClock) record(s clockSample, recv time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base.IsZero() {
		c.base = s.local
	}
	cur := c.cur.Load()
	if cur != nil && cur.anchor.localStep(s.local, s.wall) {
		// The local clocks moved apart: the samples of before, and a
		// refused one, were anchored before the step.
		c.samples, c.refused = [clockSamples]clockSample{}, nil
		cur = nil
	}
	if cur != nil {
		if absDiff(s.offset(c.base), cur.anchor.offset(c.base)) > jumpSlack(s.rtt, cur.anchor.rtt) {
			if r := c.refused; r == nil || absDiff(s.offset(c.base), r.offset(c.base)) > jumpSlack(s.rtt, r.rtt) {
				// A jump: refused until a second measurement agrees.
				c.refused = &s
				c.cur.Store(&clockReading{anchor: cur.anchor, checked: recv, suspect: true})
				return
			}
			// Confirmed: the clock stepped. The samples of before
			// measured the old clock.
			c.samples = [clockSamples]clockSample{}
			c.samples[0], c.next = *c.refused, 1
		}
	}
	c.refused = nil
	c.samples[c.next] = s
	c.next = (c.next + 1) % clockSamples
	var best *clockSample
	for i := range c.samples {
		k := &c.samples[i]
		if k.local.IsZero() || recv.Sub(k.local) > clockMaxKeep {
			continue
		}
		if best == nil || k.rtt < best.rtt {
			best = k
		}
	}
	c.cur.Store(&clockReading{anchor: *best, checked: recv})
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// claim reports whether the caller should measure the clock: it is stale
// at local and no other measurement is in flight. A true claim must be
// followed by release.
func (c *redisClock) claim(local time.Time) bool {
	return c.stale(local) && c.sampling.CompareAndSwap(false, true)
}

func (c *redisClock) release() { c.sampling.Store(false) }

// measure reads the clock with a TIME of its own on s, the master's own
// connection.
func (c *redisClock) measure(ctx context.Context, s sender) error {
	cmd := redis.NewTimeCmd(ctx, "time")
	sent := time.Now()
	if err := s.Process(ctx, cmd); err != nil {
		return fmt.Errorf("redisalgo: read Redis's clock: %w", err)
	}
	c.observe(sent, time.Now(), cmd.Val())
	return nil
}

// masterClock is one master's clock and the connection its TIME goes on.
type masterClock struct {
	clock redisClock
	// via sends the TIME: the master's own client. When inline, the TIME
	// rides in the master's pipeline (standalone and Sentinel, where the
	// client has one master); else it goes beside it on via (a Cluster
	// client would send a keyless TIME to any master).
	via    sender
	inline bool
	// flightMu guards flight, the measurement on the request path in
	// flight, nil when none is: requests that find the reading unusable
	// at once (after clockMaxUse idle, or a suspect reading) share one
	// TIME instead of each sending its own.
	flightMu sync.Mutex
	flight   *measurement
}

// measurement is one TIME on the request path that every request waiting
// for it shares: err is its outcome, set before done is closed.
type measurement struct {
	done chan struct{}
	err  error
}

// measureShared measures the clock once for every request that asks while
// the measurement is in flight (masterClock.flight). The request that
// starts it sends the TIME on its own ctx; one that waits stops waiting
// when its ctx ends, and measures itself when the one it waited for ended
// with its sender's ctx, not with an answer of Redis. (singleflight's Do
// keeps a waiter whose ctx ended, and its DoChan starts a goroutine per
// flight on the request's path: neither fits.)
func (m *masterClock) measureShared(ctx context.Context) error {
	for {
		m.flightMu.Lock()
		f := m.flight
		if f == nil {
			f = &measurement{done: make(chan struct{})}
			m.flight = f
			m.flightMu.Unlock()
			f.err = m.clock.measure(ctx, m.via)
			m.flightMu.Lock()
			m.flight = nil
			m.flightMu.Unlock()
			close(f.done)
			return f.err
		}
		m.flightMu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("redisalgo: read Redis's clock: %w", ctx.Err())
		}
		if f.err == nil || !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
			return f.err
		}
	}
}

// at returns the time a request whose instant is at, sent now, decides
// at on this master's clock (redisClock.place), measuring the clock first,
// on the request's path, when its reading may not be used.
func (m *masterClock) at(ctx context.Context, at, sent time.Time, period int64) (int64, error) {
	if now, ok := m.clock.place(at, sent, period); ok {
		return now, nil
	}
	// A refused measurement needs a second to be confirmed.
	for range 2 {
		if err := m.measureShared(ctx); err != nil {
			return 0, err
		}
		if now, ok := m.clock.place(at, time.Now(), period); ok {
			return now, nil
		}
	}
	return 0, fmt.Errorf("redisalgo: Redis's clock keeps jumping between measurements; no window is placed on it")
}

// minKeyedPeriod returns the shortest period of checks whose key names
// its window, or 0 when none does.
func minKeyedPeriod(checks []algo.Check) int64 {
	var p int64
	for i := range checks {
		if c := &checks[i]; c.Policy.KeyedWindow() && (p == 0 || c.Policy.Period < p) {
			p = c.Policy.Period
		}
	}
	return p
}
