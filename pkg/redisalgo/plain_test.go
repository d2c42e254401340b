package redisalgo

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/randsteps"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestDifferentialPlain holds plain calls to algo.ApplyAll, with the
// script paths on the same counters in between: lone one-hit fixed
// windows (plain INCRBY and PEXPIRE), requests of several hits (lean.lua),
// of several limits (lean.lua, all or nothing), with a token bucket
// (apply.lua) and refunds (apply.lua). Every decision, every stored count
// (a denied plain hit given back) and every expiry must be Go's.
func TestDifferentialPlain(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(19, 0x91a1))
		clk := newClock()
		b := newBackend(t, client, clk.opts())
		prefix := redistest.KeyPrefix(t)
		limits := make([]algo.Check, 6)
		for i := range limits {
			p := algo.Policy{Algorithm: algo.FixedWindow, Limit: 1 + r.Int64N(6), Period: algo.Minute * (1 + r.Int64N(3))}
			if i == 5 {
				p = algo.Policy{Algorithm: algo.TokenBucket, Limit: 4, Period: algo.Minute}
			}
			limits[i] = algo.Check{Domain: prefix, Entries: []algo.Entry{{Key: "k", Value: strconv.Itoa(i)}}, HashTag: -1, Policy: p, Hits: 1}
		}
		// Go's state of each counter, by its key at the step's now, and
		// when each key expires on the test's clock: the clock runs far
		// faster than Redis's, so the test expires keys itself, as Redis
		// does on its own clock in production, before a window's letter
		// comes round again.
		states := map[string]algo.State{}
		expires := map[string]int64{}
		var kinds [4]int   // plain, plain denied, script, refunds
		var charges [2]int // plain charges within the limit, and past it
		for step := range 1500 {
			now := clk.us.Add(randsteps.Gap(r, algo.Minute, 4))
			for k, e := range expires {
				if e <= now {
					// The window's whole hash expires.
					hash, _, _ := strings.Cut(k, " ")
					if err := client.Del(ctx, hash).Err(); err != nil {
						t.Fatal(err)
					}
					delete(expires, k)
					delete(states, k)
				}
			}
			var checks []algo.Check
			switch n := r.IntN(10); {
			case n < 6: // a lone one-hit fixed window: plain
				checks = []algo.Check{limits[r.IntN(5)]}
			case n < 7: // more hits: lean.lua
				c := limits[r.IntN(5)]
				c.Hits = 2
				checks = []algo.Check{c}
			case n < 8 && r.IntN(2) == 0: // a refund: apply.lua
				c := limits[r.IntN(5)]
				c.Refund = true
				checks = []algo.Check{c}
				kinds[3]++
			case n < 8: // a charge (cost: charge): plain, of all its hits
				c := limits[r.IntN(5)]
				c.Hits, c.Charge = 1+r.Int64N(4), true
				checks = []algo.Check{c}
			default: // several limits, all or nothing
				for _, i := range r.Perm(6)[:2] {
					checks = append(checks, limits[i])
				}
			}
			plain := len(checks) == 1 && plainCheck(&checks[0])
			keys := make([]string, len(checks))
			goStates := make([]algo.State, len(checks))
			for i, c := range checks {
				hash, field := counter(c, now)
				keys[i] = hash + " " + field
				goStates[i] = states[keys[i]]
			}
			goOut := make([]algo.Decision, len(checks))
			allowed := algo.ApplyAll(checks, goStates, now, goOut)
			for i := range goOut {
				// The backend reports the time it decided at (CallerTime:
				// now), which a refund of the hits names.
				goOut[i].At = now
			}
			got, err := b.Apply(ctx, time.UnixMicro(now), checks)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			// A denied plain hit is given back off the request's path.
			b.giveBacks.Wait()
			if !slices.Equal(got, goOut) {
				t.Fatalf("step %d at %d, checks %+v (plain %v):\n go    %+v\n redis %+v", step, now, checks, plain, goOut, got)
			}
			if plain && checks[0].Charge {
				if goOut[0].Remaining < 0 {
					charges[1]++
				} else {
					charges[0]++
				}
			}
			switch {
			case plain && allowed:
				kinds[0]++
			case plain:
				kinds[1]++
			default:
				kinds[2]++
			}
			for i, k := range keys {
				states[k] = goStates[i]
				p := checks[i].Policy
				if !p.KeyedWindow() {
					continue
				}
				hash, field, _ := strings.Cut(k, " ")
				v, err := client.HGet(ctx, hash, field).Result()
				want := goStates[i].Count
				if goStates[i].Time != algo.WindowIndex(now, p.Period)*p.Period {
					want = 0
				}
				switch {
				case err == redis.Nil && want == 0:
				case err != nil:
					t.Fatalf("step %d: GET %s: %v (Go's count %d)", step, k, err, want)
				case v != strconv.FormatInt(want, 10):
					t.Fatalf("step %d: %s holds %q, Go's count is %d", step, k, v, want)
				}
				if err == nil {
					expires[k] = (algo.WindowIndex(now, p.Period) + 1) * p.Period
				}
				if err == nil && allowed && checks[i].Hits > 0 && !checks[i].Refund {
					// Written now: its hash expires windowMargin after
					// its window's end, as the window's first write set
					// it (NX), at an earlier now of the test's clock,
					// which runs far faster than Redis's.
					ms := client.PTTL(ctx, hash).Val().Milliseconds()
					left := (windowLeft(p.Period, now) + windowMargin(p.Period) + 999) / 1000
					if most := (p.Period + windowMargin(p.Period) + 999) / 1000; ms > most || ms < left-1000 {
						t.Fatalf("step %d: %s PTTL %dms, want at least the %dms to its window's end and the margin, at most %dms", step, k, ms, left, most)
					}
				}
			}
		}
		t.Logf("plain allowed %d, plain denied %d, script %d (refunds %d); plain charges within the limit %d, past it %d", kinds[0], kinds[1], kinds[2], kinds[3], charges[0], charges[1])
		if charges[0] == 0 || charges[1] == 0 {
			t.Errorf("plain charges: %d within the limit, %d past it; want both exercised", charges[0], charges[1])
		}
		if kinds[0] == 0 || kinds[1] == 0 || kinds[2] == 0 || kinds[3] == 0 {
			t.Errorf("paths exercised %v; want plain allowed, plain denied, script calls and refunds", kinds)
		}
	})
}

// TestPlainConcurrentMixed: concurrent requests on one fixed window, plain
// and through the script, admit exactly the limit's hits, and once they
// are answered the count is the limit: every denied plain hit was given
// back.
func TestPlainConcurrentMixed(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, client, Options{})
		const limit, workers, each = 40, 8, 25
		c := algo.Check{Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: limit, Period: algo.Hour}, Hits: 1}
		admitted := make(chan int64, workers*each)
		errs := make(chan error, workers)
		for w := range workers {
			go func() {
				for i := range each {
					c := c
					if (w+i)%4 == 0 {
						c.Hits = 2 // lean.lua
					}
					d, err := b.Apply(ctx, time.Now(), []algo.Check{c})
					if err != nil {
						errs <- err
						return
					}
					if d[0].Allowed {
						admitted <- c.Hits
					} else {
						admitted <- 0
					}
				}
				errs <- nil
			}()
		}
		for range workers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		close(admitted)
		var sum int64
		for h := range admitted {
			sum += h
		}
		// Two-hit requests may leave one hit unused.
		if sum < limit-1 || sum > limit {
			t.Fatalf("admitted %d hits of a limit of %d", sum, limit)
		}
		b.giveBacks.Wait()
		now, _ := b.requestNow(ctx, time.Now(), []algo.Check{c})
		key, field := counter(c, now)
		if v, err := client.HGet(ctx, key, field).Int64(); err != nil || v != sum {
			t.Fatalf("%s holds %d (%v) after every request was answered, want the %d admitted", key, v, err, sum)
		}
	})
}

// TestClockPlacesWindows: in production (no CallerTime) a fixed window's
// key is the window holding Redis's TIME at the instant the caller gives,
// on this process's clock, when that instant is near the send; a refund its
// caller makes at the same instant lands in the same window. An instant far
// from the send (a caller's clock that stepped, a request that waited) is
// placed at the send instead: never in a window Redis considers over.
func TestClockPlacesWindows(t *testing.T) {
	ctx := context.Background()
	client := redistest.SharedStandalone(t).Client(t)
	b := newBackend(t, client, Options{})
	c := algo.Check{Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Second}, Hits: 1}
	redisNow := func() int64 {
		t.Helper()
		tm, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	count := func(now int64) int64 {
		key, field := counter(c, now)
		n, _ := client.HGet(ctx, key, field).Int64()
		return n
	}
	// Two seconds ago: beyond atSkew, so placed at the send.
	before := redisNow()
	if d, err := b.Apply(ctx, time.Now().Add(-2*time.Second), []algo.Check{c}); err != nil || !d[0].Allowed || d[0].Remaining != 4 {
		t.Fatalf("Apply at the past instant: %+v, %v", d, err)
	}
	after := redisNow()
	if n := count(before-2*algo.Second) + count(before-algo.Second); n != 0 {
		t.Fatalf("the hit of an instant 2 s old went to a past window")
	}
	n := count(before)
	if algo.WindowIndex(after, algo.Second) != algo.WindowIndex(before, algo.Second) {
		n += count(after)
	}
	if n != 1 {
		t.Fatalf("the hit of an instant 2 s old is in neither the window of the send nor the next")
	}
	// 100 ms ago: within atSkew, so at that instant; the refund at the
	// same instant gives it back in the same window, whatever window
	// Redis's clock is in by then.
	at := time.Now().Add(-100 * time.Millisecond)
	c.Entries = []algo.Entry{{Key: "k", Value: "w"}}
	if d, err := b.Apply(ctx, at, []algo.Check{c}); err != nil || !d[0].Allowed || d[0].Remaining != 4 {
		t.Fatalf("Apply 100 ms ago: %+v, %v", d, err)
	}
	refund := c
	refund.Refund = true
	if _, err := b.Apply(ctx, at, []algo.Check{refund}); err != nil {
		t.Fatal(err)
	}
	now := redisNow()
	for _, w := range []int64{now - 2*algo.Second, now - algo.Second, now} {
		if n := count(w); n != 0 {
			t.Errorf("the window of %d holds %d after the refund at the hit's instant, want none", w, n)
		}
	}
}

// TestRedisClockObserve: the reading is Redis's time at the middle of the
// round trip that read it; it is due again after clockMaxAge and unusable
// after clockMaxUse; the shortest round trip of the last clockMaxKeep is
// used; a measurement that jumps is refused until a second agrees; an
// instant beyond atSkew of the send is placed at the send.
func TestRedisClockObserve(t *testing.T) {
	var c redisClock
	local := time.UnixMicro(1_000_000_000_000)
	if now, ok := c.now(local); ok || !c.stale(local) || now != local.UnixMicro() {
		t.Fatalf("unmeasured clock: now %d ok %v stale %v, want the local time, not ok, stale", now, ok, c.stale(local))
	}
	if _, ok := c.place(local, local, algo.Second); ok {
		t.Fatal("an unmeasured clock placed a request")
	}
	const off = 5_000_000
	// observe's Redis time for a round trip sent at s of 400 µs, at
	// offset o (µs) from the local clock.
	redisAt := func(s time.Time, o int64) time.Time {
		return s.Add(200*time.Microsecond + time.Duration(o)*time.Microsecond)
	}
	want := func(at time.Time, o int64) int64 { return at.UnixMicro() + o }
	sent, recv := local, local.Add(400*time.Microsecond)
	c.observe(sent, recv, redisAt(sent, off))
	for _, tc := range []struct {
		at    time.Time
		stale bool
	}{
		{recv, false},
		{recv.Add(clockMaxAge), false},
		{recv.Add(clockMaxAge + time.Microsecond), true},
	} {
		if now, ok := c.now(tc.at); now != want(tc.at, off) || c.stale(tc.at) != tc.stale || !ok {
			t.Errorf("at %v: now %d stale %v ok %v, want %d stale %v", tc.at, now, c.stale(tc.at), ok, want(tc.at, off), tc.stale)
		}
	}
	// place: the instant within atSkew of the send, else the send; no
	// reading older than clockMaxUse.
	for _, tc := range []struct {
		at, sent time.Time
		want     int64
		ok       bool
	}{
		{recv.Add(-100 * time.Millisecond), recv, want(recv.Add(-100*time.Millisecond), off), true},
		{recv.Add(-300 * time.Millisecond), recv, want(recv, off), true},
		{recv.Add(10 * time.Second), recv, want(recv, off), true},
		{recv, recv.Add(clockMaxUse + time.Microsecond), 0, false},
	} {
		if now, ok := c.place(tc.at, tc.sent, algo.Second); now != tc.want || ok != tc.ok {
			t.Errorf("place(%v, %v) = %d, %v; want %d, %v", tc.at, tc.sent, now, ok, tc.want, tc.ok)
		}
	}
	// A slower round trip's measurement, within its error, counts as a
	// check; the faster one's stays in use.
	s2 := recv.Add(time.Second)
	c.observe(s2, s2.Add(time.Millisecond), s2.Add(500*time.Microsecond+(off+300)*time.Microsecond))
	if now, _ := c.now(s2); c.stale(s2.Add(time.Millisecond)) || now != want(s2, off) {
		t.Errorf("after a slow round trip: now %d stale %v, want the first offset, not stale", now, c.stale(s2))
	}
	// A jump of 7 s: refused, the clock suspect (due, and placing
	// nothing), until a second measurement agrees.
	s3 := s2.Add(time.Second)
	c.observe(s3, s3.Add(400*time.Microsecond), redisAt(s3, off+7_000_000))
	if now, _ := c.now(s3); now != want(s3, off) || !c.stale(s3) {
		t.Errorf("after a jump: now %d stale %v, want the old offset, stale", now, c.stale(s3))
	}
	if _, ok := c.place(s3, s3, algo.Second); ok {
		t.Error("a suspect clock placed a request")
	}
	s4 := s3.Add(time.Millisecond)
	c.observe(s4, s4.Add(400*time.Microsecond), redisAt(s4, off+7_000_000))
	if now, ok := c.place(s4, s4, algo.Second); !ok || now != want(s4, off+7_000_000) || c.stale(s4) {
		t.Errorf("after a confirmed jump: now %d ok %v stale %v, want the new offset", now, ok, c.stale(s4))
	}
	// A jump that the next measurement contradicts is dropped.
	s5 := s4.Add(time.Second)
	c.observe(s5, s5.Add(400*time.Microsecond), redisAt(s5, off+1_000_000))
	s6 := s5.Add(time.Millisecond)
	c.observe(s6, s6.Add(400*time.Microsecond), redisAt(s6, off+7_000_000))
	if now, ok := c.place(s6, s6, algo.Second); !ok || now != want(s6, off+7_000_000) {
		t.Errorf("after a contradicted jump: now %d ok %v, want the offset before it", now, ok)
	}
	due := s6.Add(clockMaxAge + time.Second)
	if !c.claim(due) || c.claim(due) {
		t.Fatal("a stale clock must be claimed by exactly one pipeline")
	}
	c.release()
	if c.claim(s6.Add(time.Millisecond)) {
		t.Fatal("a fresh clock was claimed")
	}
}

// TestWindowNames: a fixed window's hash names its window with four
// base-36 digits, the index modulo 36⁴, and parses back to the latest
// window at or before a time that the name can mean.
func TestWindowNames(t *testing.T) {
	c := algo.Check{Domain: "d", Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Minute}}
	tagged := c
	tagged.Entries = append(tagged.Entries, algo.Entry{Key: "p", Value: "/a"})
	tagged.HashTag = 0
	b := strconv.FormatInt(bucketOf([]byte("k:v"), 16), 36)
	for _, tc := range []struct {
		check       algo.Check
		now         int64
		hash, field string
	}{
		{c, 0, "r3{d:f1o:" + b + "}0000", "k:v"},
		{c, 35 * algo.Minute, "r3{d:f1o:" + b + "}000z", "k:v"},
		{c, 36*algo.Minute + 59*algo.Second, "r3{d:f1o:" + b + "}0010", "k:v"},
		{c, (windowCount - 1) * algo.Minute, "r3{d:f1o:" + b + "}zzzz", "k:v"},
		{c, windowCount * algo.Minute, "r3{d:f1o:" + b + "}0000", "k:v"},
		{c, -1, "r3{d:f1o:" + b + "}zzzz", "k:v"},
		{tagged, 37 * algo.Minute, "r3{d:#8}f1o:0011", "k:v:#:p:/a"},
	} {
		hash, field := CounterAt("", tc.check, tc.now, 16)
		if hash != tc.hash || field != tc.field {
			t.Errorf("CounterAt(%d) = %q %q, want %q %q", tc.now, hash, field, tc.hash, tc.field)
			continue
		}
		k, err := ParseCounter(hash, field, "", 16)
		if err != nil {
			t.Fatalf("ParseCounter(%q, %q): %v", hash, field, err)
		}
		start := algo.WindowIndex(tc.now, algo.Minute) * algo.Minute
		for _, later := range []int64{tc.now, start + (windowCount-1)*algo.Minute + 59*algo.Second} {
			if ws := k.WindowStart(later); ws != start {
				t.Errorf("%q: WindowStart(%d) = %d, want %d", hash, later, ws, start)
			}
		}
	}
	for _, bad := range [][2]string{
		{"r3{d:f1o:" + b + "}", "k:v"}, {"r3{d:f1o:" + b + "}000", "k:v"}, {"r3{d:t1o:" + b + "}0000", "k:v"},
		{"r3{d:#8}f1o", "k:v:#:p:/a"}, {"r3{d:#8}t1o:0000", "k:v:#:p:/a"}, {"r3{d:f1o:" + b + "}000A", "k:v"},
		{"r3{d:f1o:" + b + "}00000", "k:v"}, {"r3{d:#8}f1o:0000", "k:v:p:/a"}, {"r3{d:f1o:" + b + "}0000", "k"},
		{"r3{d:#9}f1o:0000", "k:v:#:p:/a"}, {"r3{d:k:v}f1o:0000", "#:p:/a"},
	} {
		if _, err := ParseCounter(bad[0], bad[1], "", 16); err == nil {
			t.Errorf("ParseCounter(%q, %q) accepted it", bad[0], bad[1])
		}
	}
}

// TestWindowOutlivesReplicaClocks: a replica whose tracked clock lags
// another's still counts into the window the other just left. The one
// ahead wrote the key a millisecond before the window's end; the key lives
// on for windowMargin, so the lagging replica's hit, a few real
// milliseconds later but inside the window on its clock, finds the count
// instead of a fresh key (which would admit the limit again).
func TestWindowOutlivesReplicaClocks(t *testing.T) {
	ctx := context.Background()
	client := redistest.SharedStandalone(t).Client(t)
	ahead, behind := newBackend(t, client, Options{CallerTime: true}), newBackend(t, client, Options{CallerTime: true})
	c := algo.Check{Domain: redistest.KeyPrefix(t), Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 3, Period: algo.Second}, Hits: 1}
	end := (t0.UnixMicro()/algo.Second + 1) * algo.Second
	if d, err := ahead.Apply(ctx, time.UnixMicro(end-1000), []algo.Check{c}); err != nil || d[0].Remaining != 2 {
		t.Fatalf("ahead: %+v, %v", d, err)
	}
	time.Sleep(5 * time.Millisecond) // past the window's end as the first replica set it
	if d, err := behind.Apply(ctx, time.UnixMicro(end-2000), []algo.Check{c}); err != nil || d[0].Remaining != 1 {
		t.Fatalf("behind: %+v, %v; want remaining 1 (the window's count), not 2 (a fresh key)", d, err)
	}
}

// TestRedisClockInvalidate: after a failed pipeline the clock is due for
// a measurement, and requests still use its reading meanwhile.
func TestRedisClockInvalidate(t *testing.T) {
	var c redisClock
	local := time.UnixMicro(1_000_000_000_000)
	c.observe(local, local.Add(400*time.Microsecond), local.Add(time.Second))
	at := local.Add(time.Millisecond)
	if c.stale(at) {
		t.Fatal("a fresh clock is stale")
	}
	c.invalidate()
	if !c.stale(at) {
		t.Error("an invalidated clock is not due for a measurement")
	}
	if now, ok := c.place(at, at, algo.Second); !ok || now != at.UnixMicro()+1_000_000-200 {
		t.Errorf("an invalidated clock placed at %d, %v; want its reading", now, ok)
	}
	c.observe(at, at.Add(400*time.Microsecond), at.Add(200*time.Microsecond+time.Second-200*time.Microsecond))
	if c.stale(at.Add(time.Millisecond)) {
		t.Error("the measurement after invalidate left the clock due")
	}
}

// TestRedisClockLocalStep: a step of the local wall clock apart from the
// monotonic one (an NTP step; a VM's resume, during whose pause the
// monotonic clock stood still) stops requests from being placed on the
// anchor of before, and the next measurement replaces the reading at once
// without waiting for a confirmation, dropping the samples of before.
// (The test's times carry no monotonic reading, so the wall readings are
// given apart.)
func TestRedisClockLocalStep(t *testing.T) {
	var c redisClock
	local := time.UnixMicro(1_000_000_000_000)
	sample := func(sent time.Time, wallStep, redisOff int64) clockSample {
		mid := sent.Add(200 * time.Microsecond)
		return clockSample{redis: mid.UnixMicro() + redisOff, local: mid, wall: mid.UnixMicro() + wallStep, rtt: 400 * time.Microsecond}
	}
	const off = 3_000_000
	c.record(sample(local, 0, off), local.Add(400*time.Microsecond))
	at := local.Add(time.Millisecond)
	if now, ok := c.placeWall(at, at, at.UnixMicro(), algo.Second); !ok || now != at.UnixMicro()+off {
		t.Fatalf("before the step: %d, %v", now, ok)
	}
	for _, step := range []int64{10_000_000, -10_000_000, 2_000_000, -2_000_000} {
		if _, ok := c.placeWall(at, at, at.UnixMicro()+step, algo.Second); ok {
			t.Errorf("a wall clock stepped by %d µs: the request was placed on the anchor of before", step)
		}
	}
	// A wall step alone: Redis's time on the monotonic clock is
	// unchanged, and after the measurement the step no longer stops
	// requests.
	s2 := local.Add(time.Second)
	c.record(sample(s2, 10_000_000, off), s2.Add(400*time.Microsecond))
	at2 := s2.Add(time.Millisecond)
	if now, ok := c.placeWall(at2, at2, at2.UnixMicro()+10_000_000, algo.Second); !ok || now != at2.UnixMicro()+off {
		t.Errorf("after a wall step and a measurement: %d, %v; want %d, true", now, ok, at2.UnixMicro()+off)
	}
	// A VM's pause of 5 s: the monotonic clock stood still, the wall and
	// Redis's clocks went on. The measurement is taken at once, without
	// the confirmation a jump of Redis's clock alone needs.
	s3 := s2.Add(time.Second)
	c.record(sample(s3, 10_000_000+5_000_000, off+5_000_000), s3.Add(400*time.Microsecond))
	at3 := s3.Add(time.Millisecond)
	if now, ok := c.placeWall(at3, at3, at3.UnixMicro()+15_000_000, algo.Second); !ok || now != at3.UnixMicro()+off+5_000_000 {
		t.Errorf("after a VM's pause and a measurement: %d, %v; want %d, true", now, ok, at3.UnixMicro()+off+5_000_000)
	}
	// Real times (with the monotonic clock) never count as a step.
	var r redisClock
	sent := time.Now()
	r.observe(sent, time.Now(), time.Now())
	if _, ok := r.place(time.Now(), time.Now(), algo.Second); !ok {
		t.Error("a reading of real times was taken for a step")
	}
}
