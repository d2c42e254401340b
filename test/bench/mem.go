package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// memResult is the in-process store's footprint with many live keys.
type memResult struct {
	keys       int64         // distinct keys stored (admitted descriptors)
	baseRSS    int64         // after start, before any key
	rss, hwm   int64         // after the keys were written
	fill       time.Duration // time to write them
	fillCalls  int64
	perRequest int
}

// memoryCheck writes opts.keys distinct keys into a fresh in-process
// envoy-rls (many descriptors per call, to spend the time on keys rather
// than on RPCs) and reads its RSS.
func (b *bench) memoryCheck(ctx context.Context) (*memResult, error) {
	s, err := b.startServer(ctx, memoryName, false, false, userRule("bench-mem", memoryLimit))
	if err != nil {
		return nil, err
	}
	defer s.proc.stop()
	m := &memResult{perRequest: b.opts.keysPerRequest}
	if m.baseRSS, _, err = procMem(s.proc.pid()); err != nil {
		return nil, err
	}
	calls := int64((b.opts.keys + m.perRequest - 1) / m.perRequest)
	res, err := runLoad(ctx, loadConfig{
		target:      s.grpcAddr,
		concurrency: b.opts.concurrency,
		perConn:     b.opts.perConn,
		duration:    10 * time.Minute,
		maxRequests: calls,
	}, distinctKeys(m.perRequest))
	if err != nil {
		return nil, err
	}
	if res.errors > 0 || res.over > 0 {
		return nil, fmt.Errorf("bench: memory: %d errors, %d denials while writing keys (first error: %v)", res.errors, res.over, res.firstErr)
	}
	m.fill, m.fillCalls = res.elapsed, res.ok
	m.keys = res.ok * int64(m.perRequest)
	// Let the runtime finish the sweep the fill started before reading.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.rss, m.hwm, err = procMem(s.proc.pid()); err != nil {
		return nil, err
	}
	return m, nil
}

// soakSample is one point of the soak's RSS curve.
type soakSample struct {
	at        time.Duration
	rss       int64
	decisions int64
}

type soakResult struct {
	samples []soakSample
	load    *loadResult
}

// soakRun sends random, never-repeating keys to a fresh in-process
// envoy-rls for opts.soak and samples its RSS: with keys expiring 10 s
// after use, a bounded store must level off.
func (b *bench) soakRun(ctx context.Context) (*soakResult, error) {
	s, err := b.startServer(ctx, soakName, false, false, userRule("bench-soak", soakLimit))
	if err != nil {
		return nil, err
	}
	defer s.proc.stop()
	every := b.opts.soakEvery
	if every <= 0 {
		every = min(max(b.opts.soak/24, time.Second), 10*time.Second)
	}
	var progress atomic.Int64
	type outcome struct {
		res *loadResult
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		res, err := runLoad(ctx, loadConfig{
			target:      s.grpcAddr,
			concurrency: b.opts.concurrency,
			perConn:     b.opts.perConn,
			duration:    b.opts.soak,
			// Far above what 2 cores can answer; the duration ends it.
			maxRequests: int64(b.opts.soak.Seconds()*200_000) + 1,
			progress:    &progress,
		}, randomKeys())
		done <- outcome{res, err}
	}()
	out := &soakResult{}
	sample := func() error {
		rss, _, err := procMem(s.proc.pid())
		if err != nil {
			return err
		}
		out.samples = append(out.samples, soakSample{at: time.Since(start), rss: rss, decisions: progress.Load()})
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := sample(); err != nil {
				<-done
				return nil, err
			}
		case o := <-done:
			if o.err != nil {
				return nil, o.err
			}
			// A last point unless the ticker has just taken one.
			if time.Since(start)-out.samples[len(out.samples)-1].at > every/2 {
				if err := sample(); err != nil {
					return nil, err
				}
			}
			out.load = o.res
			if o.res.answered() == 0 {
				return out, fmt.Errorf("bench: soak: no call answered (first error: %v)", o.res.firstErr)
			}
			return out, nil
		}
	}
}
