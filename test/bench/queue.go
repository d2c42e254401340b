package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The queue-mode phase (on_limit: delay): hold queueHeld requests at once
// on one slow gcra key, with a max_delay long enough that none leaves
// during the measurement, and read what holding costs: RSS and goroutines
// per held request, and the latency of other, unheld requests (the perUser
// load on an open limit) without and with the held ones.

const (
	queueName = "queue"
	// queueHeld is how many requests the phase holds at once.
	queueHeld = 5000
	// queueConns carries the held calls: about 100 streams a connection.
	queueConns = 50
	// queueLoad bounds each of the two latency runs.
	queueLoad = 5 * time.Second
	// rulesQueue: 1 per second with a burst of 1 queues 5 000 requests
	// over 5 000 s, within the 2 h max_delay, and releases one a second
	// while the phase runs; "user" never denies.
	rulesQueue = `domain: bench-queue
descriptors:
  - key: held
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 2h}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
`
)

// queueResult is the phase's figures.
type queueResult struct {
	held               float64 // envoy_rls_requests_held with all of them in
	baseRSS, heldRSS   int64
	baseGor, heldGor   float64 // go_goroutines
	without, with      *loadResult
	returned, released float64 // reservations given back; held left after the cancel
}

// queueRun holds queueHeld requests in a fresh in-process envoy-rls and
// measures around them. Every held call is cancelled at the end.
func (b *bench) queueRun(ctx context.Context) (*queueResult, error) {
	s, err := b.startServer(ctx, queueName, false, false, rulesQueue, "--max-delay=2h", "--max-held="+strconv.Itoa(2*queueHeld))
	if err != nil {
		return nil, err
	}
	defer s.proc.stop()
	q := &queueResult{}
	load := loadConfig{target: s.grpcAddr, concurrency: b.opts.concurrency, perConn: b.opts.perConn, warmup: b.opts.warmup, duration: min(queueLoad, b.opts.duration), maxRequests: b.opts.maxRequests}
	if q.without, err = runLoad(ctx, load, perUser("bench-queue")(b.users)); err != nil {
		return nil, err
	}
	if q.baseRSS, _, err = procMem(s.proc.pid()); err != nil {
		return nil, err
	}
	if q.baseGor, err = scrapeGauge(ctx, s.httpAddr, "go_goroutines"); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(ctx)
	wait, err := holdCalls(hctx, s.grpcAddr)
	defer func() { cancel(); wait() }()
	if err != nil {
		return nil, err
	}
	if q.held, err = waitGauge(ctx, s.httpAddr, "envoy_rls_requests_held", queueHeld*95/100, 2*time.Minute); err != nil {
		return nil, err
	}
	if q.heldRSS, _, err = procMem(s.proc.pid()); err != nil {
		return nil, err
	}
	if q.heldGor, err = scrapeGauge(ctx, s.httpAddr, "go_goroutines"); err != nil {
		return nil, err
	}
	if q.with, err = runLoad(ctx, load, perUser("bench-queue")(b.users)); err != nil {
		return nil, err
	}
	cancel()
	wait()
	if q.released, err = waitGaugeBelow(ctx, s.httpAddr, "envoy_rls_requests_held", 1, time.Minute); err != nil {
		return nil, err
	}
	q.returned, err = scrapeGauge(ctx, s.httpAddr, "envoy_rls_reservations_returned_total")
	return q, err
}

// holdCalls starts queueHeld calls on the held key, each in its own
// goroutine until ctx ends; wait returns once all have.
func holdCalls(ctx context.Context, target string) (wait func(), err error) {
	conns, err := dialConns(target, queueConns)
	if err != nil {
		return func() {}, err
	}
	var wg sync.WaitGroup
	for i := range queueHeld {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request("bench-queue", descriptor(&rlv3.RateLimitDescriptor_Entry{Key: "held", Value: "k"}))
			resp := new(rlsv3.RateLimitResponse)
			// The call ends when ctx does: a held call fails only then,
			// and one that fails sooner shows in the held count.
			_ = conns[i%len(conns)].Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, resp)
		}()
	}
	return func() { wg.Wait(); closeConns(conns) }, nil
}

// scrapeGauge reads one unlabelled series from the server's /metrics.
func scrapeGauge(ctx context.Context, httpAddr, name string) (float64, error) {
	v, found := 0.0, false
	err := fetchMetrics(ctx, "http://"+httpAddr+"/metrics", func(series, value string) error {
		if series != name {
			return nil
		}
		var err error
		v, err = strconv.ParseFloat(value, 64)
		found = true
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bench: scrape: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("bench: scrape: no %s", name)
	}
	return v, nil
}

// waitGauge polls name until it reaches at least want, for at most limit.
func waitGauge(ctx context.Context, httpAddr, name string, want float64, limit time.Duration) (float64, error) {
	return pollGauge(ctx, httpAddr, name, limit, func(v float64) bool { return v >= want })
}

// waitGaugeBelow polls name until it is below want, for at most limit.
func waitGaugeBelow(ctx context.Context, httpAddr, name string, want float64, limit time.Duration) (float64, error) {
	return pollGauge(ctx, httpAddr, name, limit, func(v float64) bool { return v < want })
}

func pollGauge(ctx context.Context, httpAddr, name string, limit time.Duration, done func(float64) bool) (float64, error) {
	deadline := time.Now().Add(limit)
	for {
		v, err := scrapeGauge(ctx, httpAddr, name)
		if err == nil && done(v) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("bench: %s is %v after %v (scrape error: %v)", name, v, limit, err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return v, ctx.Err()
		}
	}
}

// writeQueue reports the queue-mode phase.
func writeQueue(w io.Writer, q *queueResult) {
	fmt.Fprintf(w, "### Queue mode: %d requests held at once (in-process store)\n\n", queueHeld)
	perRSS, perGor := 0.0, 0.0
	if q.held > 0 {
		perRSS = float64(q.heldRSS-q.baseRSS) / q.held
		perGor = (q.heldGor - q.baseGor) / q.held
	}
	fmt.Fprintln(w, "| held | RSS before → with them | bytes/held request | goroutines before → with | goroutines/held request | other requests p50 / p99 without | with | reservations returned on cancel |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %.0f | %.1f → %.1f MB | %.0f | %.0f → %.0f | %.2f | %.0f / %.0f µs (%.0f/s) | %.0f / %.0f µs (%.0f/s) | %.0f (held after: %.0f) |\n\n",
		q.held, mb(q.baseRSS), mb(q.heldRSS), perRSS, q.baseGor, q.heldGor, perGor,
		micros(q.without.hist.quantile(0.5)), micros(q.without.hist.quantile(0.99)), rate(q.without),
		micros(q.with.hist.quantile(0.5)), micros(q.with.hist.quantile(0.99)), rate(q.with),
		q.returned, q.released)
}

// rate is a load run's decisions per second.
func rate(r *loadResult) float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.answered()) / r.elapsed.Seconds()
}
