package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	dto "github.com/prometheus/client_model/go"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// batchStats returns the pipelines sent and the commands they carried, from
// the batch-size histogram in reg. Every pipeline must also have had its
// round trip timed.
func batchStats(t testing.TB, reg *prometheus.Registry) (pipelines uint64, cmds float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sizes, trips *dto.Histogram
	for _, mf := range mfs {
		switch mf.GetName() {
		case "envoy_rls_redis_batch_size":
			sizes = mf.GetMetric()[0].GetHistogram()
		case "envoy_rls_redis_roundtrip_seconds":
			trips = mf.GetMetric()[0].GetHistogram()
		}
	}
	if sizes == nil || trips == nil {
		t.Fatal("envoy_rls_redis_batch_size or envoy_rls_redis_roundtrip_seconds not registered")
	}
	if trips.GetSampleCount() != sizes.GetSampleCount() {
		t.Fatalf("%d round trips timed for %d pipelines", trips.GetSampleCount(), sizes.GetSampleCount())
	}
	return sizes.GetSampleCount(), sizes.GetSampleSum()
}

// gates holds pipelines back: after hold, the next pipeline b sends waits
// until the returned release is called.
type gates struct {
	mu    sync.Mutex
	armed []gate
}

type gate struct{ entered, open chan struct{} }

func newGates(b *Backend) *gates {
	g := &gates{}
	wrap := func(bt *batcher) {
		send := bt.send
		bt.send = func(ctx context.Context, calls []*scriptCall) {
			g.mu.Lock()
			var next *gate
			if len(g.armed) > 0 {
				next = &g.armed[0]
				g.armed = g.armed[1:]
			}
			g.mu.Unlock()
			if next != nil {
				close(next.entered)
				<-next.open
			}
			send(ctx, calls)
		}
	}
	wrapBatchers(b, wrap)
	return g
}

// wrapBatchers calls wrap on every request batcher of b: the one, or on a
// cluster every master's, including those made later.
func wrapBatchers(b *Backend, wrap func(*batcher)) {
	cl, ok := b.topo.(*cluster)
	if !ok {
		wrap(b.topo.(*oneMaster).batch)
		return
	}
	wrap(cl.nodes.unknown.batch)
	mk := cl.nodes.newBatch
	cl.nodes.newBatch = func(mc *masterClock) *batcher {
		bt := mk(mc)
		wrap(bt)
		return bt
	}
}

// pending returns the calls queued in b's batchers.
func pending(b *Backend) int {
	return topologyPending(b.topo)
}

// hold arms a gate for the next pipeline; entered is closed when that
// pipeline waits. Tests defer release, which may be called twice.
func (g *gates) hold() (entered <-chan struct{}, release func()) {
	gt := gate{entered: make(chan struct{}), open: make(chan struct{})}
	g.mu.Lock()
	g.armed = append(g.armed, gt)
	g.mu.Unlock()
	var once sync.Once
	return gt.entered, func() { once.Do(func() { close(gt.open) }) }
}

// holdFirst sends checks on b and holds their pipeline in flight, so that
// the requests after it queue behind it; release (run at cleanup too, before
// the backend closes) lets it go. Install the gate only here: any pipeline b
// sent before would be the one held.
func holdFirst(t *testing.T, b *Backend, checks ...algo.Check) (first <-chan result, release func()) {
	t.Helper()
	entered, release := newGates(b).hold()
	t.Cleanup(release)
	first = applyAsync(context.Background(), b, checks...)
	<-entered
	return first, release
}

// leakCheckedClient returns a connected client of the shared standalone
// server and fails the test if goroutines started after it outlive the
// test; the client's own, started by its first command, are ignored.
func leakCheckedClient(t *testing.T) *redis.Client {
	t.Helper()
	client := redistest.SharedStandalone(t).Client(t)
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	return client
}

type result struct {
	d   []algo.Decision
	err error
}

// applyAsync runs one Apply in a goroutine; its result arrives on the
// returned channel.
func applyAsync(ctx context.Context, b *Backend, checks ...algo.Check) <-chan result {
	ch := make(chan result, 1)
	go func() {
		d, err := b.Apply(ctx, t0, checks)
		ch <- result{d, err}
	}()
	return ch
}

// TestBatchConcurrentExact: many goroutines share pipelines, and each
// limit still admits exactly its limit, all or nothing across two limits.
// The two limits share a hash tag, so that a cluster, too, evaluates them
// in one script (exact) rather than refunding across slots.
func TestBatchConcurrentExact(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		reg := prometheus.NewRegistry()
		b := newBackend(t, client, Options{CallerTime: true, Registerer: reg, MaxBatch: 16})
		dom := redistest.KeyPrefix(t)
		const workers, each, shared = 48, 20, 300
		sharedLimit := algo.Check{Domain: dom, Entries: entries("tenant", "t"), HashTag: 0, Policy: backendtest.PerMinute(algo.SlidingWindow, shared), Hits: 1}
		own := func(w int) algo.Check {
			return algo.Check{Domain: dom, Entries: entries("tenant", "t", "user", fmt.Sprint(w)), HashTag: 0, Policy: backendtest.PerMinute(algo.TokenBucket, each/2), Hits: 1}
		}
		var admitted atomic.Int64
		perWorker := make([]atomic.Int64, workers)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for range each {
					d, err := b.Apply(context.Background(), t0, []algo.Check{own(w), sharedLimit})
					if err != nil {
						errs <- err
						return
					}
					if d[0].Allowed && d[1].Allowed {
						admitted.Add(1)
						perWorker[w].Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Apply: %v", err)
		}
		// Each worker's own limit caps it at each/2, so the shared limit
		// sees at most workers·each/2 = 480 requests for 300 slots.
		if got := admitted.Load(); got != shared {
			t.Errorf("admitted %d, want exactly %d", got, shared)
		}
		for w := range perWorker {
			if got := perWorker[w].Load(); got > each/2 {
				t.Errorf("worker %d admitted %d, over its limit %d", w, got, each/2)
			}
		}
		// The denied requests consumed nothing of their own limit.
		var left int64
		for w := range workers {
			left += remaining(t, b, own(w))
		}
		if want := int64(workers*each/2 - shared); left != want {
			t.Errorf("own limits have %d left in total, want %d", left, want)
		}
		n, sum := batchStats(t, reg)
		t.Logf("%d requests in %d pipelines (%.1f commands per pipeline)", workers*each, n, sum/float64(n))
	})
}

// TestBatchForms: requests that arrive while a pipeline is in flight
// leave together in the next one, as soon as it returns.
func TestBatchForms(t *testing.T) {
	client := leakCheckedClient(t)
	reg := prometheus.NewRegistry()
	b := newBackend(t, client, Options{CallerTime: true, Registerer: reg})
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.FixedWindow, 5)

	first, release := holdFirst(t, b, backendtest.UserCheck(dom, "first", pol, 1))
	const waiting = 10
	var results []<-chan result
	for i := range waiting {
		results = append(results, applyAsync(context.Background(), b, backendtest.UserCheck(dom, fmt.Sprint("u", i), pol, 2)))
	}
	eventually.Holds(t, "every request is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == waiting })
	release()
	for i, ch := range append(results, first) {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if want := int64(3); i < waiting && (!r.d[0].Allowed || r.d[0].Remaining != want) {
			t.Errorf("request %d: %+v, want allowed with %d left", i, r.d[0], want)
		}
	}
	n, sum := batchStats(t, reg)
	if n != 2 || sum != waiting+1 {
		t.Errorf("%d pipelines carrying %v commands, want 2 carrying %d (1, then %d together)", n, sum, waiting+1, waiting)
	}
}

// TestBatchOverflow: with a pipeline in flight, every MaxBatch queued
// commands leave at once instead of waiting for it.
func TestBatchOverflow(t *testing.T) {
	client := leakCheckedClient(t)
	reg := prometheus.NewRegistry()
	b := newBackend(t, client, Options{CallerTime: true, Registerer: reg, MaxBatch: 4})
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.GCRA, 5)

	first, release := holdFirst(t, b, backendtest.UserCheck(dom, "first", pol, 1))
	const more = 10
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range more {
		wg.Go(func() {
			if d, err := b.Apply(context.Background(), t0, []algo.Check{backendtest.UserCheck(dom, fmt.Sprint("u", i), pol, 1)}); err != nil || !d[0].Allowed {
				t.Errorf("request %d: %+v, %v", i, d, err)
			}
			done.Add(1)
		})
	}
	// Two full batches of 4 went out beside the blocked pipeline; 2
	// commands wait for it. Wait until every request is either answered
	// or queued (a goroutine may not have queued yet when 8 are done),
	// then check the split.
	eventually.Holds(t, "every request answered or queued", func() bool {
		return done.Load()+int64(b.topo.(*oneMaster).batch.pending()) == more && done.Load() >= 8
	})
	if got, answered := b.topo.(*oneMaster).batch.pending(), done.Load(); got != 2 || answered != 8 {
		t.Errorf("%d answered and %d commands queued behind the blocked pipeline, want 8 and 2", answered, got)
	}
	release()
	wg.Wait()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	if n, sum := batchStats(t, reg); n != 4 || sum != more+1 {
		t.Errorf("%d pipelines carrying %v commands, want 4 (1, 4, 4, 2) carrying %d", n, sum, more+1)
	}
}

// TestBatchCancel: a queued caller whose ctx ends returns at once. Still
// queued, its commands are never sent; in flight in a shared pipeline, they
// complete in the background. Neither disturbs the other requests.
func TestBatchCancel(t *testing.T) {
	client := leakCheckedClient(t)
	reg := prometheus.NewRegistry()
	b := newBackend(t, client, Options{CallerTime: true, Registerer: reg})
	g := newGates(b)
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.SlidingLog, 3)
	inFlight := backendtest.UserCheck(dom, "in-flight", pol, 1)
	queued := backendtest.UserCheck(dom, "queued", pol, 1)
	bystander := backendtest.UserCheck(dom, "bystander", pol, 1)

	// A first request goes out inline and is held, so that the next ones
	// queue.
	entered1, release1 := g.hold()
	defer release1()
	blocker := applyAsync(context.Background(), b, backendtest.UserCheck(dom, "blocker", pol, 1))
	<-entered1
	ctxA, cancelA := context.WithCancel(context.Background())
	a := applyAsync(ctxA, b, inFlight)
	eventually.Holds(t, "the in-flight request is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == 1 })
	// The flusher takes it into a shared pipeline, which is held.
	entered2, release2 := g.hold()
	defer release2()
	release1()
	if r := <-blocker; r.err != nil {
		t.Fatal(r.err)
	}
	<-entered2
	ctxB, cancelB := context.WithCancel(context.Background())
	qb := applyAsync(ctxB, b, queued)
	c := applyAsync(context.Background(), b, bystander)
	eventually.Holds(t, "two requests are queued", func() bool { return b.topo.(*oneMaster).batch.pending() == 2 })

	cancelB()
	if r := <-qb; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("queued request after cancel: %v, want context.Canceled", r.err)
	}
	cancelA()
	if r := <-a; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("in-flight request after cancel: %v, want context.Canceled", r.err)
	}
	release2()
	if r := <-c; r.err != nil || !r.d[0].Allowed || r.d[0].Remaining != 2 {
		t.Fatalf("bystander: %+v, %v; want allowed with 2 left", r.d, r.err)
	}
	// Three pipelines of one command: the blocker, the in-flight request,
	// the bystander; the canceled queued request was left out.
	if n, sum := batchStats(t, reg); n != 3 || sum != 3 {
		t.Errorf("%d pipelines carrying %v commands, want 3 carrying 1 each", n, sum)
	}
	if got := remaining(t, b, queued); got != 3 {
		t.Errorf("the canceled queued request consumed: %d left, want 3", got)
	}
	// The in-flight command reached Redis after its caller gave up, and
	// its pipeline returned before the bystander's was sent.
	if got := remaining(t, b, inFlight); got != 2 {
		t.Errorf("the canceled in-flight request: %d left, want 2 (applied)", got)
	}
	if _, err := b.Apply(ctxB, t0, []algo.Check{queued}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled ctx: %v, want context.Canceled", err)
	}
}

// TestBatchClose: Close waits for queued and in-flight requests, which
// all get their decisions; later calls fail with ErrClosed.
func TestBatchClose(t *testing.T) {
	client := leakCheckedClient(t)
	b := newBackend(t, client, Options{CallerTime: true})
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.TokenBucket, 5)
	first, release := holdFirst(t, b, backendtest.UserCheck(dom, "first", pol, 1))
	results := []<-chan result{first}
	for i := range 5 {
		results = append(results, applyAsync(context.Background(), b, backendtest.UserCheck(dom, fmt.Sprint("u", i), pol, 1)))
	}
	eventually.Holds(t, "every request is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == 5 })
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	eventually.Holds(t, "Close has begun", func() bool {
		b.topo.(*oneMaster).batch.mu.Lock()
		defer b.topo.(*oneMaster).batch.mu.Unlock()
		return b.topo.(*oneMaster).batch.closed
	})
	if _, err := b.Apply(context.Background(), t0, []algo.Check{backendtest.UserCheck(dom, "late", pol, 1)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply during Close: %v, want ErrClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a pipeline was in flight")
	default:
	}
	release()
	<-closed
	for i, ch := range results {
		if r := <-ch; r.err != nil || !r.d[0].Allowed {
			t.Errorf("request %d: %+v, %v; want allowed", i, r.d, r.err)
		}
	}
	b.Close() // idempotent
}

// TestBatchMetricsShared: two backends on one registry share the
// histogram instead of failing to register.
func TestBatchMetricsShared(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	reg := prometheus.NewRegistry()
	b1 := newBackend(t, client, Options{Registerer: reg, LazyLoad: true})
	b2 := newBackend(t, client, Options{Registerer: reg, LazyLoad: true})
	dom := redistest.KeyPrefix(t)
	backendtest.Apply(t, b1, t0.UnixMicro(), backendtest.UserCheck(dom, "a", backendtest.PerMinute(algo.FixedWindow, 1), 1))
	backendtest.Apply(t, b2, t0.UnixMicro(), backendtest.UserCheck(dom, "b", backendtest.PerMinute(algo.FixedWindow, 1), 1))
	if n, _ := batchStats(t, reg); n < 2 {
		t.Errorf("%d pipelines counted, want ≥ 2", n)
	}
}

// TestNoBatch: with batching off every request still decides exactly.
func TestNoBatch(t *testing.T) {
	b := newBackend(t, redistest.SharedStandalone(t).Client(t), Options{CallerTime: true, NoBatch: true})
	if b.topo.(*oneMaster).batch != nil {
		t.Fatal("NoBatch backend has a batcher")
	}
	c := backendtest.UserCheck(redistest.KeyPrefix(t), "u", backendtest.PerMinute(algo.FixedWindow, 2), 1)
	for i, want := range []bool{true, true, false} {
		if d := backendtest.Apply(t, b, t0.UnixMicro(), c)[0]; d.Allowed != want {
			t.Errorf("request %d: %+v, want allowed=%v", i, d, want)
		}
	}
}

// oneCall returns the script call of c alone, at the server's TIME, as
// Apply makes it, in a scratch of its own.
func oneCall(b *Backend, c algo.Check) *call {
	s := new(scratch)
	s.reset(1)
	s.nows = append(s.nows, 0)
	b.keys(s, []algo.Check{c})
	b.group(s, []algo.Check{c})
	return &s.calls[0]
}

// TestAbandonedJobNotReused: after a round trip is abandoned while
// queued, a later round trip of the same call (a refund, or the EVAL after
// NOSCRIPT) must not reuse the job the queue still points at, or it would
// be sent twice.
func TestAbandonedJobNotReused(t *testing.T) {
	ctx := context.Background()
	client := leakCheckedClient(t)
	reg := prometheus.NewRegistry()
	b := newBackend(t, client, Options{Registerer: reg})
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.FixedWindow, 1)
	blocker, release := holdFirst(t, b, backendtest.UserCheck(dom, "blocker", pol, 1))

	s := &scratch{job: newJob()}
	first := s.job
	abandoned := backendtest.UserCheck(dom, "abandoned", pol, 1)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.roundTrip(cctx, s, []*call{oneCall(b, abandoned)}) }()
	eventually.Holds(t, "the first round trip is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned round trip: %v, want context.Canceled", err)
	}
	if !s.lost || s.job == first {
		t.Fatalf("after abandoning: lost=%v, job replaced=%v; want both", s.lost, s.job != first)
	}
	second := oneCall(b, backendtest.UserCheck(dom, "second", pol, 1))
	go func() { done <- b.roundTrip(ctx, s, []*call{second}) }()
	eventually.Holds(t, "the second round trip is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == 2 })
	release()
	if err := <-done; err != nil || second.script.err != nil {
		t.Fatalf("second round trip: %v, %v", err, second.script.err)
	}
	if _, allowed, err := parseApplyInts(second.script.reply, second.out); err != nil || !allowed {
		t.Fatalf("second call: allowed=%v, %v; want allowed", allowed, err)
	}
	if r := <-blocker; r.err != nil {
		t.Fatal(r.err)
	}
	if n, sum := batchStats(t, reg); n != 2 || sum != 2 {
		t.Errorf("%d pipelines carrying %v calls, want 2 carrying 1 each", n, sum)
	}
	if got, err := client.Exists(ctx, string(keyOf(abandoned))).Result(); err != nil || got != 0 {
		t.Errorf("the abandoned call ran: EXISTS = %d, %v", got, err)
	}
}

// evalshaCalls returns how many EVALSHA commands server has run.
func evalshaCalls(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	return int64(infoSum(t, client, "commandstats", "cmdstat_evalsha:calls="))
}

// TestBatchMergesScriptCalls: the requests queued behind a pipeline leave
// as one merged script call, decide as they would alone, and a request
// whose key holds another type fails alone.
func TestBatchMergesScriptCalls(t *testing.T) {
	ctx := context.Background()
	client := redistest.Standalone(t).Client(t)
	b := newBackend(t, client, Options{CallerTime: true})
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.TokenBucket, 3)
	bad := backendtest.UserCheck(dom, "bad", pol, 1)
	if err := client.LPush(ctx, string(keyOf(bad)), "x").Err(); err != nil {
		t.Fatal(err)
	}
	before := evalshaCalls(t, client)

	first, release := holdFirst(t, b, backendtest.UserCheck(dom, "first", pol, 1))
	// Five requests on one shared limit (3 admitted, in queue order), two
	// on their own limits, one on the wrong-type key.
	var results []<-chan result
	queue := func(c algo.Check) {
		results = append(results, applyAsync(ctx, b, c))
		eventually.Holds(t, "the request is queued", func() bool { return b.topo.(*oneMaster).batch.pending() == len(results) })
	}
	for range 5 {
		queue(backendtest.UserCheck(dom, "shared", pol, 1))
	}
	queue(bad)
	queue(backendtest.UserCheck(dom, "own1", pol, 2))
	queue(backendtest.UserCheck(dom, "own2", pol, 3))
	release()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	var got []string
	for i, ch := range results {
		r := <-ch
		switch {
		case i == 5:
			if !errors.Is(r.err, ErrWrongType) {
				t.Errorf("request on the wrong-type key: %v, want ErrWrongType", r.err)
			}
			continue
		case r.err != nil:
			t.Fatalf("request %d: %v", i, r.err)
		}
		got = append(got, fmt.Sprintf("%v/%d", r.d[0].Allowed, r.d[0].Remaining))
	}
	want := "[true/2 true/1 true/0 false/0 false/0 true/1 true/0]"
	if fmt.Sprint(got) != want {
		t.Errorf("merged decisions %v, want %s", got, want)
	}
	if n := evalshaCalls(t, client) - before; n != 2 {
		t.Errorf("%d EVALSHA for 9 requests, want 2 (the first alone, then 8 merged)", n)
	}
}

// TestBatchMergesPerSlot: on a cluster, queued requests for one master
// merge per hash slot; requests of different slots on that master still
// travel in one pipeline.
func TestBatchMergesPerSlot(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	b := newBackend(t, cl.ClusterClient(t), Options{CallerTime: true})
	dom := redistest.KeyPrefix(t)
	// Not a fixed window, whose one-hit checks go as plain commands.
	pol := backendtest.PerMinute(algo.TokenBucket, 2)
	firstCheck := backendtest.UserCheck(dom, "first", pol, 1)
	master := cl.MasterForSlot(t, keySlot(keyOf(firstCheck)))
	// Four users on the master of "first", three requests each; slots
	// counts the distinct slots of their keys, one merged call each.
	var users []string
	slots := map[int]bool{}
	for i := 0; len(users) < 4; i++ {
		u := fmt.Sprint("u", i)
		slot := keySlot(keyOf(backendtest.UserCheck(dom, u, pol, 1)))
		if cl.MasterForSlot(t, slot).Addr == master.Addr {
			users = append(users, u)
			slots[slot] = true
		}
	}
	evalsha := func() (n int64) {
		for _, m := range cl.Masters(t) {
			n += evalshaCalls(t, m.Client(t))
		}
		return n
	}
	before := evalsha()
	first, release := holdFirst(t, b, firstCheck)
	var results []<-chan result
	for range 3 {
		for _, u := range users {
			results = append(results, applyAsync(ctx, b, backendtest.UserCheck(dom, u, pol, 1)))
			eventually.Holds(t, "the request is queued", func() bool { return pending(b) == len(results) })
		}
	}
	release()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		round := i / len(users)
		if want := round < 2; r.d[0].Allowed != want || r.d[0].Remaining != max(int64(1-round), 0) {
			t.Errorf("request %d (user %s, round %d): %+v, want allowed=%v", i, users[i%len(users)], round, r.d[0], want)
		}
	}
	if n := evalsha() - before; n != int64(1+len(slots)) {
		t.Errorf("%d EVALSHA for %d requests on %d slots, want %d (the first alone, then one per slot)", n, 1+len(results), len(slots), 1+len(slots))
	}
}

// TestBatchLinger: with a linger, a request that finds nothing in flight
// waits for others, and they leave together in one pipeline. The linger is
// made an hour here so that no clock decides the test: it ends because the
// batch filled (MaxBatch), which sends every queued request at once.
func TestBatchLinger(t *testing.T) {
	client := leakCheckedClient(t)
	reg := prometheus.NewRegistry()
	b := newBackend(t, client, Options{CallerTime: true, Registerer: reg, MaxBatch: 4, BatchLinger: MaxBatchLinger})
	b.topo.(*oneMaster).batch.linger = time.Hour
	dom := redistest.KeyPrefix(t)
	pol := backendtest.PerMinute(algo.TokenBucket, 5)
	var results []<-chan result
	for i := range 4 {
		results = append(results, applyAsync(context.Background(), b, backendtest.UserCheck(dom, fmt.Sprint("u", i), pol, 1)))
		if i < 3 {
			eventually.Holds(t, "the request waits in the lingering batch", func() bool { return b.topo.(*oneMaster).batch.pending() == i+1 })
		}
	}
	for i, ch := range results {
		if r := <-ch; r.err != nil || !r.d[0].Allowed {
			t.Fatalf("request %d: %+v, %v", i, r.d, r.err)
		}
	}
	if n, sum := batchStats(t, reg); n != 1 || sum != 4 {
		t.Errorf("%d pipelines carrying %v commands, want 1 carrying all 4", n, sum)
	}
}

func TestBatchLingerBound(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	for _, tt := range []struct {
		linger time.Duration
		ok     bool
	}{
		{0, true}, {MaxBatchLinger, true}, {MaxBatchLinger + 1, false}, {-1, false},
	} {
		_, err := New(client, Options{LazyLoad: true, BatchLinger: tt.linger})
		if ok := err == nil; ok != tt.ok || (err != nil && !strings.Contains(err.Error(), "batch linger")) {
			t.Errorf("BatchLinger %v: %v, want ok %v and an error naming the batch linger", tt.linger, err, tt.ok)
		}
	}
}
