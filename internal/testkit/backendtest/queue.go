package backendtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// RunQueue runs the queue-mode scenarios (algo.Check.MaxDelay): shaping,
// cancellation and all or nothing. Layers that answer from their own view
// of a counter (a deny cache) would answer differently and do not run it.
func RunQueue(t *testing.T, f Factory) {
	t.Run("Shaping", func(t *testing.T) { shaping(t, f) })
	t.Run("CancelReturns", func(t *testing.T) { cancelReturns(t, f) })
	t.Run("QueueAllOrNothing", func(t *testing.T) { queueAllOrNothing(t, f) })
}

// ShapingPolicy is the shaping scenario's limit: gcra, 10 per second, a
// burst of 1; with ShapingMaxDelay 500 ms, 20 requests at once admit 6,
// reserved 100 ms apart.
var ShapingPolicy = algo.Policy{Algorithm: algo.GCRA, Limit: 10, Period: algo.Second, Burst: 1}

// ShapingMaxDelay is the shaping scenario's max_delay in µs.
const ShapingMaxDelay int64 = 500_000

// QueueCheck is a one-hit check on key in queue mode with maxDelay µs.
func QueueCheck(domain, key string, pol algo.Policy, maxDelay int64) algo.Check {
	c := check(domain, pol, 1, "key", key)
	c.MaxDelay = maxDelay
	return c
}

// ConcurrentAdmissions sends n one-check requests of c to the backends
// (round robin) at once, all at now, and returns the admitted requests'
// pass times (now + Delay), sorted, and how many were denied.
func ConcurrentAdmissions(t *testing.T, bs []Backend, now int64, n int, c algo.Check) (passes []int64, denied int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := bs[i%len(bs)].Apply(context.Background(), time.UnixMicro(now), []algo.Check{c})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case !d[0].Allowed:
				denied++
			case d[0].Delay > 0:
				if d[0].ReservedAt != now+d[0].Delay {
					errs <- fmt.Errorf("reserved at %d, want now %d + delay %d", d[0].ReservedAt, now, d[0].Delay)
				}
				passes = append(passes, d[0].ReservedAt)
			default:
				passes = append(passes, now)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Apply: %v", err)
	}
	slices.Sort(passes)
	return passes, denied
}

// CheckShaped checks the shaping scenario's outcome: want admitted, their
// pass times exactly one emission interval (period/limit) apart from
// start, the rest denied.
func CheckShaped(t *testing.T, passes []int64, denied, n, want int, start int64, pol algo.Policy) {
	t.Helper()
	if len(passes) != want || denied != n-want {
		t.Fatalf("%d admitted, %d denied of %d; want %d admitted (%v)", len(passes), denied, n, want, passes)
	}
	interval := pol.Period / pol.Limit
	for i, at := range passes {
		if at != start+int64(i)*interval {
			t.Fatalf("pass times %v: #%d at +%dµs, want +%dµs (one every %dµs)", passes, i, at-start, int64(i)*interval, interval)
		}
	}
}

// shaping: 20 concurrent requests through gcra 10/s burst 1 with 500 ms of
// queue: one passes now, five are reserved 100 ms apart, the rest denied.
func shaping(t *testing.T, f Factory) {
	c := QueueCheck(t.Name(), "k", ShapingPolicy, ShapingMaxDelay)
	passes, denied := ConcurrentAdmissions(t, []Backend{f(t)}, Start, 20, c)
	CheckShaped(t, passes, denied, 20, 6, Start, ShapingPolicy)
}

// cancelReturns: the latest reservation is given back and its slot taken
// by the next request; one that a later reservation follows is not.
func cancelReturns(t *testing.T, f Factory) {
	b := f(t)
	c := QueueCheck(t.Name(), "k", ShapingPolicy, ShapingMaxDelay)
	var ds []algo.Decision
	for range 4 {
		ds = append(ds, Apply(t, b, Start, c)[0])
	}
	cancelOf := func(d algo.Decision) algo.Check {
		x := c
		x.MaxDelay, x.Refund, x.ReservedAt = 0, true, d.ReservedAt
		return x
	}
	if g := Apply(t, b, Start+1, cancelOf(ds[2]))[0].Granted; g != 0 {
		t.Fatalf("cancel of the reservation at +200ms, which one at +300ms follows: gave back %d, want 0", g)
	}
	if g := Apply(t, b, Start+1, cancelOf(ds[3]))[0].Granted; g != 1 {
		t.Fatalf("cancel of the latest reservation: gave back %d, want 1", g)
	}
	if d := Apply(t, b, Start+2, c)[0]; !d.Allowed || d.ReservedAt != ds[3].ReservedAt {
		t.Fatalf("after a cancel: %+v, want the returned slot %d", d, ds[3].ReservedAt)
	}
}

// queueAllOrNothing: one limit queues, the other denies: nothing is
// reserved; when the other admits, both pass at the queued time.
func queueAllOrNothing(t *testing.T, f Factory) {
	b := f(t)
	// One hash tag: on a cluster a request queues only within one slot.
	queued := check(t.Name(), ShapingPolicy, 1, "tenant", "t", "key", "q")
	queued.HashTag, queued.MaxDelay = 0, ShapingMaxDelay
	strict := check(t.Name(), algo.Policy{Algorithm: algo.FixedWindow, Limit: 2, Period: algo.Minute}, 1, "tenant", "t", "key", "strict")
	strict.HashTag = 0
	expect(t, Apply(t, b, Start, queued, strict)[0], true, 0)
	ds := Apply(t, b, Start, queued, strict)
	if !ds[0].Allowed || !ds[1].Allowed || ds[0].Delay != 100_000 || ds[1].Delay != ds[0].Delay {
		t.Fatalf("queued with an admitting limit: %+v, want both allowed after 100ms", ds)
	}
	ds = Apply(t, b, Start, queued, strict)
	if ds[0].Allowed || ds[1].Allowed || ds[0].Delay != 0 {
		t.Fatalf("queued with a denying limit: %+v, want denied without delay", ds)
	}
	// Nothing was reserved: the next queued request takes +200ms.
	if d := Apply(t, b, Start, queued)[0]; d.Delay != 200_000 {
		t.Fatalf("after a denied request: %+v, want the slot at +200ms", d)
	}
}
