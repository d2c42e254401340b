// Package readiness keeps the one answer to "may this replica take
// traffic", shared by the HTTP /readyz and /healthcheck endpoints and the
// gRPC health service so that they cannot disagree. It runs a check it is
// given (the backend's reachability under the failure policy), adds the
// draining state of a shutdown, and tells one publisher whenever the answer
// flips. It knows nothing of HTTP, gRPC, rules or backends and must not
// import them.
//
// The rules are deliberately not part of the answer: a Loader never serves
// an empty rule set and keeps the last good rules when a push is bad, so a
// config push (the same push reaches every replica at once) can never take
// all replicas out together. The one exception is made by the caller's
// check: an xDS config source that has received no config yet.
package readiness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrDraining is the reason given once Drain was called.
var ErrDraining = errors.New("shutting down")

// Options configure a Tracker. The zero value is a tracker that is always
// ready until drained.
type Options struct {
	// Check reports why the replica cannot take traffic, or nil. It runs
	// under Timeout and must be safe for concurrent use with the serving
	// path; nil means always ready.
	Check func(ctx context.Context) error
	// Timeout bounds one Check; zero means one second.
	Timeout time.Duration
	// Interval is how often Run re-evaluates between probes; zero means
	// DefaultInterval.
	Interval time.Duration
	// OnChange is told each flip of the answer: nil when the replica turns
	// ready, the reason when it turns unready. It is called once from New
	// with the first answer, then in order, never concurrently, before the
	// evaluation that caused it returns, so a caller that saw an answer
	// from Check knows OnChange has it too. It must not call the Tracker.
	OnChange func(err error)
}

// Tracker evaluates readiness on demand (every probe) and on a timer (Run),
// so that a publisher such as a gRPC health service also follows changes
// between probes. Its methods are safe for concurrent use.
type Tracker struct {
	opts     Options
	draining atomic.Bool

	mu    sync.Mutex // serializes evaluations, so answers publish in order
	ready bool       // the answer last given to OnChange
}

// DefaultInterval is Options.Interval's default: often enough that gRPC
// health watchers follow a backend that fails or recovers within a probe
// period or two.
const DefaultInterval = 2 * time.Second

// New returns a tracker and publishes its first answer, evaluated now.
func New(ctx context.Context, opts Options) *Tracker {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	t := &Tracker{opts: opts}
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.evaluate(ctx)
	t.ready = err == nil
	if opts.OnChange != nil {
		opts.OnChange(err)
	}
	return t
}

// Check evaluates readiness now and returns why the replica is not ready,
// or nil.
func (t *Tracker) Check(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.evaluate(ctx)
	if ready := err == nil; ready != t.ready {
		t.ready = ready
		if t.opts.OnChange != nil {
			t.opts.OnChange(err)
		}
	}
	return err
}

// evaluate runs the check; t.mu is held.
func (t *Tracker) evaluate(ctx context.Context) error {
	if t.draining.Load() {
		return ErrDraining
	}
	if t.opts.Check == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	return t.opts.Check(ctx)
}

// Drain makes the replica unready from now on, for a shutdown: load
// balancers stop sending traffic before the servers stop. The new answer
// is published before Drain returns.
func (t *Tracker) Drain() {
	t.draining.Store(true)
	_ = t.Check(context.Background())
}

// Run re-evaluates readiness every Options.Interval until ctx is done, so
// that the publisher follows a backend that fails or recovers while nobody
// probes. It returns nil.
func (t *Tracker) Run(ctx context.Context) error {
	tick := time.NewTicker(t.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			// Not canceled with ctx: a shutdown must not publish "context
			// canceled" as the reason; Drain says why.
			_ = t.Check(context.WithoutCancel(ctx))
		}
	}
}
