package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// workload makes the requests of one scenario. newWorker is called once per
// worker; the function it returns picks the request for call number seq
// (0-based, shared by all workers). Requests are built once per worker and
// changed in place, so the generator allocates almost nothing per call.
type workload struct {
	newWorker func() func(rnd *rand.Rand, seq int64) *rlsv3.RateLimitRequest
}

// loadConfig bounds one closed-loop run.
type loadConfig struct {
	target      string        // gRPC host:port
	concurrency int           // workers, each with one call in flight
	perConn     int           // workers sharing one ClientConn
	warmup      time.Duration // unmeasured lead-in
	duration    time.Duration // measured interval, at most
	maxRequests int64         // calls over warmup and measurement, at most
	// rate, when positive, paces the workers: call n (0-based, over all
	// workers) is not sent before n/rate seconds after the start. A
	// server that cannot keep up gets the closed loop's pace instead.
	rate float64
	// onStart and onEnd run right before and right after the measured
	// interval; they take the CPU and Redis snapshots.
	onStart, onEnd func()
	// progress, when set, counts answered calls as they happen (the soak
	// samples it).
	progress *atomic.Int64
}

// loadResult describes the measured interval.
type loadResult struct {
	elapsed  time.Duration
	ok       int64 // answered OK
	over     int64 // answered OVER_LIMIT
	errors   int64 // RPC errors
	firstErr error
	hist     histogram // latency of answered calls
	capped   bool      // the run ended on maxRequests, not on time
}

// answered is the number of decisions in the measured interval.
func (r *loadResult) answered() int64 { return r.ok + r.over }

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

type worker struct {
	hist     histogram
	ok, over int64
	errs     int64
	firstErr error
}

// runLoad drives a closed loop of ShouldRateLimit calls: every worker
// sends one request, waits for the answer, and sends the next (no sooner
// than cfg.rate allows). It returns when duration has passed after
// warmup, when maxRequests calls were sent, or when ctx ends.
func runLoad(ctx context.Context, cfg loadConfig, wl workload) (*loadResult, error) {
	if cfg.concurrency < 1 || cfg.maxRequests < 1 {
		return nil, errors.New("bench: load: concurrency and max requests must be positive")
	}
	perConn := max(cfg.perConn, 1)
	conns, err := dialConns(cfg.target, (cfg.concurrency+perConn-1)/perConn)
	if err != nil {
		return nil, err
	}
	defer closeConns(conns)
	return runCalls(ctx, cfg, func(i int) callFunc {
		next, conn := wl.newWorker(), conns[i/perConn]
		resp := new(rlsv3.RateLimitResponse)
		return func(ctx context.Context, rnd *rand.Rand, seq int64) (bool, error) {
			err := conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, next(rnd, seq), resp)
			return err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, err
		}
	})
}

// callFunc makes call number seq (0-based, shared by all workers) and
// reports whether it was denied; a worker owns its callFunc, so it may
// keep buffers between calls.
type callFunc func(ctx context.Context, rnd *rand.Rand, seq int64) (denied bool, err error)

// runCalls runs cfg.concurrency workers, worker i making its calls with
// newCall(i), paced, bounded and measured as runLoad describes: the loop
// that both the gRPC load and the HTTP load through Envoy use.
func runCalls(ctx context.Context, cfg loadConfig, newCall func(i int) callFunc) (*loadResult, error) {
	if cfg.concurrency < 1 || cfg.maxRequests < 1 {
		return nil, errors.New("bench: load: concurrency and max requests must be positive")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &loop{cfg: cfg, ctx: wctx, paceStart: time.Now()}
	var wg sync.WaitGroup
	workers := make([]*worker, cfg.concurrency)
	for i := range workers {
		w := new(worker)
		workers[i] = w
		call := newCall(i)
		rnd := rand.New(rand.NewPCG(uint64(i)+1, 0x9e3779b97f4a7c15))
		wg.Go(func() { l.work(w, call, rnd) })
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	stopWorkers := func() {
		l.phase.Store(phaseStop)
		cancel()
		<-allDone
	}
	res, err := l.measure(ctx, allDone, stopWorkers)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		res.hist.merge(&w.hist)
		res.ok += w.ok
		res.over += w.over
		res.errors += w.errs
		if res.firstErr == nil {
			res.firstErr = w.firstErr
		}
	}
	return res, nil
}

// loop is the state the workers of one runLoad share.
type loop struct {
	cfg       loadConfig
	ctx       context.Context
	paceStart time.Time
	phase     atomic.Int32
	issued    atomic.Int64
}

// work makes calls with call until the loop stops or the request cap is
// reached, counting into w what the measure phase sees.
func (l *loop) work(w *worker, call callFunc, rnd *rand.Rand) {
	for l.phase.Load() != phaseStop {
		seq := l.issued.Add(1)
		if seq > l.cfg.maxRequests {
			return
		}
		if l.cfg.rate > 0 {
			due := l.paceStart.Add(time.Duration(float64(seq-1) / l.cfg.rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				time.Sleep(wait)
			}
		}
		t0 := time.Now()
		denied, err := call(l.ctx, rnd, seq-1)
		lat := time.Since(t0)
		if l.cfg.progress != nil && err == nil {
			l.cfg.progress.Add(1)
		}
		if l.phase.Load() != phaseMeasure {
			continue
		}
		switch {
		case err != nil:
			w.errs++
			if w.firstErr == nil {
				w.firstErr = err
			}
		case denied:
			w.over++
			w.hist.record(lat)
		default:
			w.ok++
			w.hist.record(lat)
		}
	}
}

// measure runs the warmup, then the measured phase, then stops the
// workers (stop) and returns the elapsed time of the measured phase.
func (l *loop) measure(ctx context.Context, allDone <-chan struct{}, stop func()) (*loadResult, error) {
	cfg := l.cfg
	if cfg.warmup > 0 {
		select {
		case <-time.After(cfg.warmup):
		case <-allDone:
			return nil, errors.New("bench: load: request cap reached during warmup")
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		}
	}
	if cfg.onStart != nil {
		cfg.onStart()
	}
	res := &loadResult{}
	start := time.Now()
	l.phase.Store(phaseMeasure)
	timer := time.NewTimer(cfg.duration)
	defer timer.Stop()
	var ctxErr error
	select {
	case <-timer.C:
	case <-allDone:
		res.capped = true
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	// Stop counting first, snapshot, then tear the calls down: cancelling
	// in-flight calls costs the server work that belongs to no decision.
	l.phase.Store(phaseStop)
	res.elapsed = time.Since(start)
	if cfg.onEnd != nil {
		cfg.onEnd()
	}
	stop()
	if ctxErr != nil {
		return nil, ctxErr
	}
	return res, nil
}

// snapEdges makes cfg take a snapshot with snap right before the measured
// interval (start true) and right after it, into before and after; err
// returns what the snapshots failed with, once the run is over.
func snapEdges[T any](cfg *loadConfig, snap func(start bool) (T, error)) (before, after *T, err func() error) {
	before, after = new(T), new(T)
	var errs [2]error
	cfg.onStart = func() { *before, errs[0] = snap(true) }
	cfg.onEnd = func() { *after, errs[1] = snap(false) }
	return before, after, func() error { return errors.Join(errs[:]...) }
}

// dialConns opens n client connections to target, or none.
func dialConns(target string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeConns(conns)
			return nil, fmt.Errorf("bench: load: dial %s: %w", target, err)
		}
		conns[i] = cc
	}
	return conns, nil
}

func closeConns(conns []*grpc.ClientConn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}
