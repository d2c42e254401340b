package redisalgo

import (
	"context"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// timeCounter counts the TIME commands a node's client sends.
type timeCounter struct {
	n *atomic.Int64
}

func (h timeCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h timeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "time" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h timeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "time" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestClockPerMasterStoppedMaster: on a Cluster with one master stopped
// (SIGSTOP), fixed-window requests for keys on the other masters, for
// over 10 s, all succeed and send no TIME to the stopped master: each
// master's clock is read on that master's own connection, and measuring
// it never waits on another master. The other masters' clocks were
// measured meanwhile (their TIMEs are counted), so the zero is not for
// want of measuring.
func TestClockPerMasterStoppedMaster(t *testing.T) {
	cs := redistest.Cluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	var mu sync.Mutex
	times := map[string]*atomic.Int64{}
	cc.OnNewNode(func(rdb *redis.Client) {
		mu.Lock()
		defer mu.Unlock()
		n := times[rdb.Options().Addr]
		if n == nil {
			n = new(atomic.Int64)
			times[rdb.Options().Addr] = n
		}
		rdb.AddHook(timeCounter{n})
	})
	count := func(addr string) int64 {
		mu.Lock()
		defer mu.Unlock()
		if n := times[addr]; n != nil {
			return n.Load()
		}
		return 0
	}
	b := newBackend(t, cc, Options{})
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	check := func(i int) algo.Check {
		return algo.Check{Domain: prefix, Entries: []algo.Entry{{Key: "k", Value: strconv.Itoa(i)}}, HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1 << 40, Period: algo.Second}, Hits: 1}
	}
	master := func(c algo.Check) *redistest.Server {
		key, _ := counter(c, 0)
		return cs.MasterForSlot(t, keySlot([]byte(key)))
	}
	stopped := master(check(0))
	var others []algo.Check
	for i := 1; len(others) < 16 && i < 1000; i++ {
		if c := check(i); master(c).Addr != stopped.Addr {
			others = append(others, c)
		}
	}
	// Every master's node and clock is in use before the stop.
	for i := range 8 {
		for _, c := range []algo.Check{check(0), others[i]} {
			if _, err := b.Apply(ctx, time.Now(), []algo.Check{c}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stopped.Pause(t)
	t.Cleanup(func() { stopped.Resume(t) })
	before := count(stopped.Addr)
	var othersBefore int64
	for _, m := range cs.Masters(t) {
		if m.Addr != stopped.Addr {
			othersBefore += count(m.Addr)
		}
	}
	start := time.Now()
	requests := 0
	// Over 10 s of requests (12 s), bounded in count.
	for time.Since(start) < 12*time.Second && requests < 20000 {
		c := others[requests%len(others)]
		if _, err := b.Apply(ctx, time.Now(), []algo.Check{c}); err != nil {
			t.Fatalf("request %d for a key on a running master: %v", requests, err)
		}
		requests++
		time.Sleep(2 * time.Millisecond)
	}
	var othersAfter int64
	for _, m := range cs.Masters(t) {
		if m.Addr != stopped.Addr {
			othersAfter += count(m.Addr)
		}
	}
	t.Logf("%d requests over %v; TIMEs to the running masters: %d", requests, time.Since(start), othersAfter-othersBefore)
	if n := count(stopped.Addr) - before; n != 0 {
		t.Errorf("%d TIMEs sent to the stopped master for requests that do not use it", n)
	}
	if othersAfter-othersBefore < 2 {
		t.Errorf("%d TIMEs to the running masters over the run; their clocks were not kept measured", othersAfter-othersBefore)
	}
}

// TestClockStepNoOverAdmission: replicas whose clock source (the instant
// each request is given at) is stepped by ±10 s and ±2 s under load never
// admit more than a window's limit into any window of Redis's clock, on
// standalone Redis and on a Cluster. Each admitted hit is put in its
// window by its reset_after from the instant it was sent, on the test's own
// tracking of Redis's clock (error far below half a period), so a hit
// counted into an expired window's fresh key shows up in the window it was
// admitted in.
func TestClockStepNoOverAdmission(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		const limit, period, replicas, workers = 8, algo.Second, 2, 2
		prefix := redistest.KeyPrefix(t)
		counters := make([]algo.Check, 3)
		for i := range counters {
			counters[i] = algo.Check{Domain: prefix, Entries: []algo.Entry{{Key: "k", Value: strconv.Itoa(i)}}, HashTag: -1,
				Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: limit, Period: period}, Hits: 1}
		}
		// The test's Redis clock: offset from the local monotonic clock.
		base := time.Now()
		tm, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		mid := base.Add(time.Since(base) / 2)
		redisAt := func(local time.Time) int64 { return tm.UnixMicro() + local.Sub(mid).Microseconds() }

		steps := []time.Duration{0, -10 * time.Second, 10 * time.Second, -2 * time.Second, 2 * time.Second, 0}
		const phase = 500 * time.Millisecond
		type hit struct{ counter, window int64 }
		var mu sync.Mutex
		admitted := map[hit]int{}
		var total, requests atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, replicas*workers)
		start := time.Now()
		for r := range replicas {
			b := newBackend(t, client, Options{})
			for w := range workers {
				wg.Go(func() {
					for i := 0; i < 50000; i++ {
						el := time.Since(start)
						k := int(el / phase)
						if k >= len(steps) {
							return
						}
						// The replicas step at different times.
						step := steps[(k+r)%len(steps)]
						at := time.UnixMicro(time.Now().UnixMicro() + step.Microseconds())
						ci := (i + w) % len(counters)
						// The backend places the request at about this
						// instant: as Apply starts, before any I/O
						// (a measurement of the clock aside).
						sent := time.Now()
						d, err := b.Apply(ctx, at, []algo.Check{counters[ci]})
						requests.Add(1)
						if err != nil {
							errs <- err
							return
						}
						if !d[0].Allowed {
							continue
						}
						end := float64(redisAt(sent)+d[0].ResetAfter) / float64(period)
						mu.Lock()
						admitted[hit{int64(ci), int64(math.Round(end))}]++
						mu.Unlock()
						total.Add(1)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		full := 0
		for h, n := range admitted {
			if n == limit {
				full++
			}
			if n > limit {
				t.Errorf("counter %d, window ending at %d s: %d hits admitted, limit %d", h.counter, h.window, n, limit)
			}
		}
		t.Logf("%d requests, %d admitted in %d counter windows, %d of them full", requests.Load(), total.Load(), len(admitted), full)
		if full < len(admitted)/2 {
			t.Fatalf("the load filled %d of %d windows: the test proves nothing", full, len(admitted))
		}
	})
}

// TestClockSingleFlight: requests that all find the clock unmeasured (a
// fresh replica, or one idle past clockMaxUse) share one TIME on the
// request path instead of each sending its own (issue 39). Redis is
// paused while they arrive, so that the first measurement is still in
// flight when every other request asks; INFO commandstats counts the
// TIMEs Redis ran.
func TestClockSingleFlight(t *testing.T) {
	ctx := context.Background()
	client := redistest.Standalone(t).Client(t)
	b := newBackend(t, client, Options{NoBatch: true})
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Do(ctx, "client", "pause", 300, "all").Err(); err != nil {
		t.Fatal(err)
	}
	const requests = 32
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for i := range requests {
		wg.Go(func() {
			c := backendtest.UserCheck("d", strconv.Itoa(i), backendtest.PerMinute(algo.FixedWindow, 5), 1)
			if _, err := b.Apply(ctx, time.Now(), []algo.Check{c}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stats := commandStats(t, ctx, client)
	if n := stats["time"].calls; n != 1 {
		t.Errorf("%d requests on an unmeasured clock sent %d TIMEs, want 1", requests, n)
	}
	if n := stats["hincrby"].calls; n != requests {
		t.Errorf("HINCRBY ran %d times, want %d: not every request was decided", n, requests)
	}
}
