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

// runLoad drives a closed loop: every worker sends one request, waits for
// the answer, and sends the next (no sooner than cfg.rate allows). It returns when duration has passed after
// warmup, when maxRequests calls were sent, or when ctx ends.
func runLoad(ctx context.Context, cfg loadConfig, wl workload) (*loadResult, error) {
	if cfg.concurrency < 1 || cfg.maxRequests < 1 {
		return nil, errors.New("bench: load: concurrency and max requests must be positive")
	}
	perConn := max(cfg.perConn, 1)
	conns := make([]*grpc.ClientConn, (cfg.concurrency+perConn-1)/perConn)
	for i := range conns {
		cc, err := grpc.NewClient("passthrough:///"+cfg.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeConns(conns)
			return nil, fmt.Errorf("bench: load: dial %s: %w", cfg.target, err)
		}
		conns[i] = cc
	}
	defer closeConns(conns)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		phase  atomic.Int32
		issued atomic.Int64
		wg     sync.WaitGroup
	)
	workers := make([]*worker, cfg.concurrency)
	paceStart := time.Now()
	for i := range workers {
		w := new(worker)
		workers[i] = w
		next := wl.newWorker()
		conn := conns[i/perConn]
		rnd := rand.New(rand.NewPCG(uint64(i)+1, 0x9e3779b97f4a7c15))
		wg.Go(func() {
			resp := new(rlsv3.RateLimitResponse)
			for phase.Load() != phaseStop {
				seq := issued.Add(1)
				if seq > cfg.maxRequests {
					return
				}
				if cfg.rate > 0 {
					due := paceStart.Add(time.Duration(float64(seq-1) / cfg.rate * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					}
				}
				req := next(rnd, seq-1)
				t0 := time.Now()
				err := conn.Invoke(wctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, resp)
				lat := time.Since(t0)
				if cfg.progress != nil && err == nil {
					cfg.progress.Add(1)
				}
				if phase.Load() != phaseMeasure {
					continue
				}
				switch {
				case err != nil:
					w.errs++
					if w.firstErr == nil {
						w.firstErr = err
					}
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
					w.over++
					w.hist.record(lat)
				default:
					w.ok++
					w.hist.record(lat)
				}
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	res := &loadResult{}
	stopWorkers := func() {
		phase.Store(phaseStop)
		cancel()
		<-allDone
	}
	if cfg.warmup > 0 {
		select {
		case <-time.After(cfg.warmup):
		case <-allDone:
			return nil, errors.New("bench: load: request cap reached during warmup")
		case <-ctx.Done():
			stopWorkers()
			return nil, ctx.Err()
		}
	}
	if cfg.onStart != nil {
		cfg.onStart()
	}
	start := time.Now()
	phase.Store(phaseMeasure)
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
	phase.Store(phaseStop)
	res.elapsed = time.Since(start)
	if cfg.onEnd != nil {
		cfg.onEnd()
	}
	stopWorkers()
	if ctxErr != nil {
		return nil, ctxErr
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

func closeConns(conns []*grpc.ClientConn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}
