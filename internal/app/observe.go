package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/refstats"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// observability is what the statsd and tracing settings started; with
// both off it adds nothing to the request path.
type observability struct {
	statsd *refstats.Sender
	tracer *tracing.Provider
	// ref is the reference's counters, nil when neither --reference-metrics
	// nor statsd wants them.
	ref *rls.ReferenceMetrics
	log *zap.Logger
}

// newObservability builds the statsd sender, the tracer provider and the
// reference's counters cfg asks for.
func newObservability(ctx context.Context, cfg ObserveConfig, version string, log *zap.Logger, reg prometheus.Registerer) (*observability, error) {
	o := &observability{log: log}
	var err error
	// The sender sends the reference's counters, which time each call
	// with the sender's Observe: it gets their source now, filled in
	// below once they exist, before anything runs.
	src := &refSource{}
	if cfg.Statsd != nil {
		so := *cfg.Statsd
		so.Logger, so.Source = log, src
		if o.statsd, err = refstats.New(so, rls.StatScopeServer, rls.ResponseTimeStat); err != nil {
			return nil, fmt.Errorf("--statsd-addr: %w", err)
		}
		log.Info("sending envoyproxy/ratelimit's statsd stats", zap.String("statsd_addr", net.JoinHostPort(so.Host, strconv.Itoa(so.Port))), zap.String("protocol", so.Protocol))
	}
	if cfg.Tracing != nil {
		opt := *cfg.Tracing
		opt.ServiceVersion = version
		if o.tracer, err = tracing.New(ctx, opt); err != nil {
			return nil, err
		}
		log.Info("tracing enabled", zap.String("service", opt.ServiceName), zap.String("protocol", opt.Protocol), zap.Float64("sampling_rate", opt.SamplingRate))
	}
	if cfg.ReferenceMetrics || o.statsd != nil {
		ro := rls.ReferenceOptions{NearLimitRatio: cfg.NearLimitRatio}
		if cfg.ReferenceMetrics {
			ro.Registerer = reg
		}
		if o.statsd != nil {
			ro.OnResponse = o.statsd.Observe
		}
		o.ref = rls.NewReferenceMetricsWith(ro)
		src.m = o.ref
	}
	return o, nil
}

// refSource is the statsd sender's source: the reference's counters, set
// after the sender that their OnResponse needs was built.
type refSource struct{ m *rls.ReferenceMetrics }

func (r *refSource) Stats(f func(scope, name string, value uint64)) { r.m.Stats(f) }

// onReload is the reference's config-load counter, or nil.
func (o *observability) onReload() func(error) {
	if o.ref == nil {
		return nil
	}
	return o.ref.ConfigLoaded
}

// run sends the statsd stats until ctx ends, then once more.
func (o *observability) run(ctx context.Context) error {
	if o.statsd == nil {
		return nil
	}
	return o.statsd.Run(ctx)
}

// requestTracer is the service's tracer: nil (not a typed nil) when off.
func (o *observability) requestTracer() rls.RequestTracer {
	if o.tracer == nil {
		return nil
	}
	return o.tracer
}

// wrapBackend wraps b in a span per call, named by the store, when
// tracing is on.
func (o *observability) wrapBackend(b rls.Backend, name string) rls.Backend {
	if o.tracer == nil {
		return b
	}
	if name == "memory" {
		name = "memstore"
	}
	return o.tracer.Backend(b, name)
}

// tracerShutdownWait bounds the export of the last spans at shutdown.
const tracerShutdownWait = 5 * time.Second

// close exports the last spans.
func (o *observability) close() {
	if o.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownWait)
	defer cancel()
	if err := o.tracer.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		o.log.Warn("tracing shutdown", zap.Error(err))
	}
}
