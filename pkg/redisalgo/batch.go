package redisalgo

// Cross-request batching (docs/architecture.md#batching-calls-in-flight). While a pipeline is in flight,
// concurrent Apply calls put their script calls in one queue; as soon as
// that pipeline returns, one flusher goroutine sends everything queued as a
// single pipeline, and so on until the queue is empty. Under load each round
// trip therefore carries many requests: Redis reads and writes one socket
// buffer per batch instead of one per request, and the client makes one
// syscall pair per batch.
//
// A request that finds nothing in flight is sent at once on its caller's
// goroutine, with its caller's ctx, exactly as without batching: there is
// no timer and no goroutine hand-off, so low load pays nothing. Requests
// arriving meanwhile queue behind it; when it returns, the caller starts
// the flusher for them.
//
// With a linger (Options.BatchLinger), a request that finds nothing in
// flight does not leave at once: it queues itself and waits up to the
// linger for others to join, then sends what queued as one pipeline, whose
// calls merge into one script call per slot. At moderate load, where
// requests rarely overlap, this trades up to the linger of latency for
// fewer script calls: each costs Redis a fixed overhead on top of its
// requests (BENCHMARKS.md). The wait yields the processor rather than
// sleeping, because Go's timers wake an idle process about a millisecond
// late, and it ends early once a full batch has queued; it costs the
// waiting goroutine CPU for up to the linger per batch.
//
// The flusher runs only while there is work: it exits when it finds the
// queue empty, so an idle Backend holds no goroutine and one that is never
// closed leaks none. When the queue reaches maxBatch calls while a
// pipeline is in flight, those calls leave at once in a pipeline of their
// own instead of waiting, so a burst never waits behind more than one round
// trip per maxBatch calls.
//
// A job is one caller's typed script calls (merge.go), encoded into
// commands only when their pipeline leaves; they always travel in one
// pipeline. A queued caller waits for its job or for its ctx. A job whose
// ctx ends while it is still queued is never sent; one that is already in
// flight completes in the background (Redis may apply it, which can only
// under-admit), and its memory is no longer the caller's to reuse. Shared
// pipelines run under no caller's ctx: the client's timeouts bound them.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxBatch is the number of queued script calls at which a second
// pipeline leaves without waiting for the one in flight. It also bounds how
// many requests one merged script call carries (merge.go), as
// Options.MaxCallCost bounds their summed cost, and so how long one script
// holds Redis.
const DefaultMaxBatch = 128

// MaxBatchLinger is the longest Options.BatchLinger: a linger holds
// every request that leads a batch for up to that long, and Envoy waits
// on it.
const MaxBatchLinger = 500 * time.Microsecond

// ValidateBatchLinger reports what is wrong with a batch linger, naming
// the bound.
func ValidateBatchLinger(d time.Duration) error {
	if d < 0 || d > MaxBatchLinger {
		return fmt.Errorf("redisalgo: batch linger %v must be between 0 (off) and %v", d, MaxBatchLinger)
	}
	return nil
}

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("redisalgo: backend closed")

// Job states. A job moves from queued to taken (by a flusher, under the
// batcher's lock) or to abandoned (by its caller whose ctx ended), never
// both: whichever compare-and-swap wins decides whether it is sent.
const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// job is one caller's script calls and the channel that reports them done.
// The caller's pooled scratch holds it; see batcher.do for when the two may
// be reused.
type job struct {
	calls []*scriptCall
	state atomic.Int32
	// done receives one value when every call has its result. Buffered,
	// so that a flusher never blocks on a caller that stopped waiting.
	done chan struct{}
	// after, when set, is called instead of signalling done: a posted
	// job (batcher.post) has no caller waiting for it.
	after func()
}

func newJob() *job { return &job{done: make(chan struct{}, 1)} }

// batcher queues jobs and sends them in shared pipelines. It is safe for
// concurrent use.
type batcher struct {
	// send runs calls in one round trip and sets each one's reply or
	// error.
	send     func(ctx context.Context, calls []*scriptCall)
	maxBatch int
	sizes    prometheus.Observer // calls per pipeline; nil for none
	// linger is Options.BatchLinger: how long a request that finds
	// nothing in flight waits for others before its pipeline leaves.
	linger time.Duration

	mu      sync.Mutex
	queue   []*job
	queued  int  // calls in queue
	running bool // a pipeline is in flight (inline or the flusher's)
	closed  bool
	// wg counts inline sends, the flusher and overflow senders, so that
	// close waits for all of them.
	wg sync.WaitGroup

	// The flusher's buffers: only the one active flusher touches them.
	jobs  []*job
	calls []*scriptCall
	// flushFn is b.flush, bound once: starting a goroutine on a func value
	// allocates nothing, on a method value it allocates the binding.
	flushFn func()
}

func newBatcher(send func(context.Context, []*scriptCall), maxBatch int, sizes prometheus.Observer) *batcher {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	b := &batcher{send: send, maxBatch: maxBatch, sizes: sizes}
	b.flushFn = b.flush
	return b
}

// do sends j's calls, at once when nothing is in flight, else in a shared
// pipeline, and waits for their results. On nil, every call of j has its
// reply or error. On an error (ctx's, or ErrClosed) the caller must not
// read j's calls; abandoned then reports whether j was queued, in which
// case neither j nor the memory its calls use may ever be reused, because
// a flusher may still hold them. The calls slice itself is free again once
// do returns: a flusher copies it when it takes the job.
func (b *batcher) do(ctx context.Context, j *job) (abandoned bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false, ErrClosed
	}
	if !b.running && b.linger > 0 {
		// Idle: j leads a batch, which others may join while it lingers.
		b.running = true
		b.wg.Add(1)
		j.state.Store(jobQueued)
		b.queue = append(b.queue, j)
		b.queued += len(j.calls)
		b.mu.Unlock()
		b.lead(j)
		return b.wait(ctx, j)
	}
	if !b.running {
		// Idle (the queue is empty whenever nothing runs): send inline.
		b.running = true
		b.wg.Add(1)
		b.mu.Unlock()
		b.observe(len(j.calls))
		b.send(ctx, j.calls)
		b.handOff()
		return false, nil
	}
	j.state.Store(jobQueued)
	b.queue = append(b.queue, j)
	b.queued += len(j.calls)
	if b.queued >= b.maxBatch {
		// A full batch does not wait for the pipeline in flight.
		jobs, calls := b.take(nil, nil)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.run(jobs, calls)
		}()
	}
	b.mu.Unlock()
	return b.wait(ctx, j)
}

// wait waits until the queued job j is done or ctx ends; its results are
// do's.
func (b *batcher) wait(ctx context.Context, j *job) (abandoned bool, err error) {
	select {
	case <-j.done:
		return false, nil
	case <-ctx.Done():
	}
	if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
		// Never sent, and no flusher will send it; the queue may still
		// point at j until a flusher skips it.
		return true, ctx.Err()
	}
	// Taken: in flight, or already done.
	select {
	case <-j.done:
		return false, nil
	default:
		return true, ctx.Err()
	}
}

// lead lingers, then sends the batch that j, its caller's job, leads: the
// queue's first maxBatch calls' worth. The linger ends early when a full
// batch took j (the queue reached maxBatch). The caller holds the running
// pipeline's place in the wait group, which lead hands to the flusher or
// releases. The linger ignores the caller's ctx: it is bounded by
// MaxBatchLinger, and the calls it holds are other callers' too.
func (b *batcher) lead(j *job) {
	start := time.Now()
	for j.state.Load() == jobQueued && time.Since(start) < b.linger {
		runtime.Gosched()
	}
	b.mu.Lock()
	// Only the goroutine that set running touches the flusher's buffers.
	jobs, calls := b.take(b.jobs[:0], b.calls[:0])
	b.mu.Unlock()
	b.run(jobs, calls)
	clear(jobs)
	clear(calls)
	b.jobs, b.calls = jobs[:0], calls[:0]
	b.handOff()
}

// handOff ends a pipeline sent by a caller (inline or leading a batch):
// the flusher takes over what queued meanwhile, inheriting the caller's
// place in the wait group, or nothing runs any more.
func (b *batcher) handOff() {
	b.mu.Lock()
	if len(b.queue) > 0 {
		go b.flushFn()
	} else {
		b.running = false
		b.wg.Done()
	}
	b.mu.Unlock()
}

// take removes up to maxBatch calls' worth of jobs from the queue (at
// least one job, whatever its size) and marks them taken, skipping
// abandoned ones. It appends them to jobs and their calls to calls. The
// caller holds b.mu.
func (b *batcher) take(jobs []*job, calls []*scriptCall) ([]*job, []*scriptCall) {
	n, size := 0, 0
	for n < len(b.queue) {
		k := len(b.queue[n].calls)
		if n > 0 && size+k > b.maxBatch {
			break
		}
		size += k
		n++
	}
	for _, j := range b.queue[:n] {
		if j.state.CompareAndSwap(jobQueued, jobTaken) {
			jobs = append(jobs, j)
			calls = append(calls, j.calls...)
		}
	}
	m := copy(b.queue, b.queue[n:])
	clear(b.queue[m:])
	b.queue = b.queue[:m]
	b.queued -= size
	return jobs, calls
}

// flush sends batches until the queue is empty, then exits.
func (b *batcher) flush() {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.jobs, b.calls = b.take(b.jobs[:0], b.calls[:0])
		b.mu.Unlock()
		b.run(b.jobs, b.calls)
		clear(b.jobs)
		clear(b.calls)
	}
}

// run sends calls in one pipeline and reports every job done. The pipeline
// is shared, so no caller's ctx governs it: the client's timeouts bound it,
// and a caller that stops waiting does not cancel the others.
func (b *batcher) run(jobs []*job, calls []*scriptCall) {
	if len(calls) == 0 {
		return
	}
	b.observe(len(calls))
	b.send(context.Background(), calls)
	for _, j := range jobs {
		if j.after != nil {
			j.after()
			continue
		}
		// The last touch of j: its caller may reuse it as soon as this lands.
		j.done <- struct{}{}
	}
}

// post queues j to leave with the next pipeline, and returns at once: no
// one waits for j, whose after is called once its calls have their
// results. When nothing is in flight a flusher starts for it, so j never
// waits for a request that may not come. It reports false, and drops j,
// after close.
func (b *batcher) post(j *job) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	j.state.Store(jobQueued)
	b.queue = append(b.queue, j)
	b.queued += len(j.calls)
	if !b.running {
		b.running = true
		b.wg.Add(1)
		go b.flushFn()
	}
	return true
}

func (b *batcher) observe(calls int) {
	if b.sizes != nil {
		b.sizes.Observe(float64(calls))
	}
}

// close stops accepting jobs and waits until every queued and in-flight
// job is done.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

// sharedHistogram returns the histogram registered with reg, reusing one
// that another Backend registered there already.
func sharedHistogram(reg prometheus.Registerer, opts prometheus.HistogramOpts) (prometheus.Histogram, error) {
	h := prometheus.NewHistogram(opts)
	if err := reg.Register(h); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(prometheus.Histogram); ok {
				return old, nil
			}
		}
		return nil, err
	}
	return h, nil
}
