// Package refstats sends envoyproxy/ratelimit's statsd stats, under its
// names, to a statsd server (in Envoy Gateway's Deployment, the
// statsd_exporter sidecar, which maps them onto Prometheus names). It
// uses lyft/gostats's store, the reference's own statsd client, so the
// names and values are the reference's: counters as the growth since the
// last flush, one timer line per call, and EXTRA_TAGS encoded into the
// name as ".__key=value" after the scope. The lines go through a sink of
// its own (sink.go) in gostats's wire format, TCP by default.
//
// The counters themselves live in the service (rls.ReferenceMetrics,
// plain atomics on the request path); a Sender reads them on every flush
// and sends what grew, so a request costs nothing here but the timer
// line. It must not count anything itself, read the environment or touch
// Prometheus. It starts no goroutine: every flush runs on its caller's
// (Run's), bounded in time, so Run's end is the Sender's.
package refstats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	gostats "github.com/lyft/gostats"
	"go.uber.org/zap"
)

// Options configure a Sender.
type Options struct {
	// Host and Port are the statsd server's (STATSD_HOST, STATSD_PORT).
	Host string
	Port int
	// Protocol is tcp (the reference's) or udp.
	Protocol string
	// Tags are added to every stat (EXTRA_TAGS).
	Tags map[string]string
	// FlushInterval is how often counters are sent; 0 means 5s, gostats's
	// default (GOSTATS_FLUSH_INTERVAL_SECONDS).
	FlushInterval time.Duration
	// Logger receives the client's connection warnings; nil: none.
	Logger *zap.Logger
	// Source is the counters to send; New requires it. It is read only
	// by Flush and Run, so a caller whose source needs the Sender first
	// (rls.ReferenceMetrics takes Observe) may pass one whose value it
	// completes before Run.
	Source Source
}

// Validate names the first bad field.
func (o Options) Validate() error {
	switch {
	case o.Host == "":
		return errors.New("refstats: no statsd host")
	case o.Port <= 0 || o.Port > 65535:
		return fmt.Errorf("refstats: statsd port %d: want 1-65535", o.Port)
	case o.Protocol != "tcp" && o.Protocol != "udp":
		return fmt.Errorf("refstats: statsd protocol %q: want tcp or udp", o.Protocol)
	case o.FlushInterval < 0:
		return fmt.Errorf("refstats: flush interval %v is negative", o.FlushInterval)
	}
	return nil
}

// Source yields every counter with its scope, statsd name and cumulative
// value (rls.ReferenceMetrics.Stats).
type Source interface {
	Stats(f func(scope, name string, value uint64))
}

// Sender sends a Source's counters and the call timer to statsd. Its
// methods are safe for concurrent use.
type Sender struct {
	opts  Options
	store gostats.Store
	sink  *sink
	timer gostats.Timer

	mu       sync.Mutex
	scopes   map[string]gostats.Scope
	counters map[string]gostats.Counter
}

// New returns a Sender to the statsd server o names; it connects at the
// first flush, and again after a failed one. timerScope and timerName
// name the per-call timer.
func New(o Options, timerScope, timerName string) (*Sender, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Source == nil {
		return nil, errors.New("refstats: no counter source")
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = 5 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	sk := newSink(o.Protocol, net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), log.Named("statsd"))
	s := &Sender{opts: o, store: gostats.NewStore(sk, false), sink: sk, scopes: map[string]gostats.Scope{}, counters: map[string]gostats.Counter{}}
	s.timer = s.scope(timerScope).NewMilliTimer(timerName)
	return s, nil
}

// scope returns the scope named name, with the tags. s.mu need not be
// held: scopes are made before Run and under s.mu after.
func (s *Sender) scope(name string) gostats.Scope {
	sc, ok := s.scopes[name]
	if !ok {
		sc = s.store.ScopeWithTags(name, s.opts.Tags)
		s.scopes[name] = sc
	}
	return sc
}

// Observe sends one call's duration, in milliseconds as the reference's
// timer does (with the fraction it truncates).
func (s *Sender) Observe(d time.Duration) {
	s.timer.AddValue(float64(d) / float64(time.Millisecond))
}

// Flush sends every counter of the source that grew since the last flush.
func (s *Sender) Flush() {
	s.mu.Lock()
	s.opts.Source.Stats(func(scope, name string, v uint64) {
		key := scope + "\x00" + name
		c, ok := s.counters[key]
		if !ok {
			c = s.scope(scope).NewCounter(name)
			s.counters[key] = c
		}
		c.Set(v)
	})
	s.mu.Unlock()
	s.store.Flush()
}

// Run flushes the source every flush interval until ctx ends, then once
// more, on its own goroutine (within flushBudget), and closes the
// connection. It returns nil: statsd being unreachable costs the stats,
// not the service.
func (s *Sender) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush()
			s.sink.close()
			return nil
		case <-t.C:
			s.Flush()
		}
	}
}
