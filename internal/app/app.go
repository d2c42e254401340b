// Package app is envoy-rls's composition root: New builds every component
// of the serve command from a Config, and Run serves until its context
// ends (a part that stops early is logged and serving goes on), then shuts
// everything down in order and joins every goroutine it started.
//
// app must not read flags, environment variables or files of its own
// choosing: internal/serveconfig turns those into a Config. Errors name the
// setting by its command-line flag (--config-dir), since that is how an
// operator sets it.
package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/refstats"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

// Config is everything the serve command was told, already parsed and
// checked by its reader (internal/serveconfig).
type Config struct {
	// Logger receives every component's log; nil discards.
	Logger *zap.Logger
	// Version is the build's version, for the log and the build-info metric.
	Version string

	Rules     RulesConfig
	Backend   BackendConfig
	Service   ServiceConfig
	Overrides OverridesConfig
	Observe   ObserveConfig
	Servers   ServersConfig
	Console   ConsoleConfig
	RLQS      RLQSConfig
}

// RulesConfig says where the rules come from.
type RulesConfig struct {
	// Options are the parse options; app adds the logger and the reload
	// observers.
	Options rules.Options
	// Dir is the watched rule directory, used when XDS is nil.
	Dir string
	// XDS, when set, takes the rules from an xDS management server
	// instead; app fills its Rules, OnUpdate, Logger and Registerer.
	XDS *xdsrules.Config
}

// BackendConfig is the backend stack and its Redis clients.
type BackendConfig struct {
	// Stack configures the layers; app fills its clients, Logger and
	// Registerer.
	Stack stack.Config
	// Redis and PerSecondRedis are the clients to build; nil Redis runs
	// the in-process store.
	Redis, PerSecondRedis *redisclient.Options
}

// ServiceConfig is the rate-limit service's own settings (pkg/rls).
type ServiceConfig struct {
	// Service holds the service's settings; app fills in what it builds:
	// Rules, Backend, Adjust, Metrics, ReferenceMetrics, Tracer, Logger
	// and Hold.
	Service rls.Config
	// MaxHeld is rls.HoldConfig.MaxHeld.
	MaxHeld int
}

// OverridesConfig configures runtime overrides and adaptive controllers.
type OverridesConfig struct {
	Refresh, MaxTTL time.Duration
	// AdaptiveFile is the adaptive controllers' YAML file; empty runs none.
	AdaptiveFile  string
	PrometheusURL string
}

// ObserveConfig is what leaves the process besides answers: statsd
// stats, traces and the reference's metrics.
type ObserveConfig struct {
	// Statsd, when set, sends the reference's statsd stats.
	Statsd *refstats.Options
	// Tracing, when set, traces every call over OTLP.
	Tracing *tracing.Options
	// ReferenceMetrics exports the reference's counters on /metrics.
	ReferenceMetrics bool
	NearLimitRatio   float64
}

// App is the assembled serve command. Run it once: when it returns it has
// released everything New built, as a failed New has.
type App struct {
	log     *zap.Logger
	version string
	// defaultAlgorithm names the default algorithm for the start-up log.
	defaultAlgorithm string
	reg              *prometheus.Registry
	rules            *rulesSource
	backend          *backend
	obs              *observability
	svc              *rls.Service
	rlqs             *rlqs.Server
	srv              *servers
	// console is the console's state; nil without the debug listener.
	console *consoleParts
	// runs are the long-lived components besides the servers and the
	// backend stack: the rule source, statsd, readiness, warm-up,
	// overrides, adaptive controllers and the RLQS refresh. Each runs
	// until the servers have drained (Run).
	runs []func(context.Context) error
}

// New builds every component cfg describes and opens the listeners;
// nothing runs until Run. On error, what was built is released.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	a := &App{log: cfg.Logger, version: cfg.Version, reg: prometheus.NewRegistry(),
		defaultAlgorithm: cfg.Service.Service.DefaultAlgorithm.String()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(cfg.Version))
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if a.obs, err = newObservability(ctx, cfg.Observe, cfg.Version, a.log, a.reg); err != nil {
		return nil, err
	}
	if a.console, err = newConsole(cfg); err != nil {
		return nil, err
	}
	onReload := a.obs.onReload()
	if a.console != nil {
		onReload = chainReload(onReload, a.console.source.observe)
	}
	if a.rules, err = newRules(cfg.Rules, onReload, a.log, a.reg); err != nil {
		return nil, err
	}
	if a.backend, err = newBackend(ctx, cfg.Backend, cfg.Overrides, a.log, a.reg); err != nil {
		return nil, err
	}
	if a.svc, err = a.newService(cfg.Service); err != nil {
		return nil, err
	}
	if a.rlqs, err = a.newRLQS(cfg.RLQS, cfg.Backend.Stack.KeyPrefix); err != nil {
		return nil, err
	}
	if a.srv, err = newServers(ctx, cfg.Servers, a.handlers(cfg), a.reg, a.log); err != nil {
		return nil, err
	}
	a.runs = append(a.runs, a.rules.run, a.obs.run, a.srv.ready.Run, a.rlqs.Run)
	if a.console != nil {
		a.runs = append(a.runs, a.console.rates.Run)
	}
	a.runs = append(a.runs, a.backend.runs...)
	return a, nil
}

// limitAdjusters is the one list both protocols adjust limits by
// (ShouldRateLimit's service and the RLQS server): a warm-up ramp first,
// then the overrides, so a factor scales the ramped limit and an absolute
// value replaces whatever came before.
func (a *App) limitAdjusters() []rls.LimitAdjuster {
	return []rls.LimitAdjuster{a.backend.warmup, a.backend.overrides}
}

// newService builds the rate-limit service over the rules and backend.
func (a *App) newService(cfg ServiceConfig) (*rls.Service, error) {
	c := cfg.Service
	c.Adjust = a.limitAdjusters()
	c.Rules = a.rules.current
	c.Backend = a.obs.wrapBackend(a.backend.stack, a.backend.stack.Name())
	c.Tracer = a.obs.requestTracer()
	c.Metrics = rls.NewMetrics(a.reg)
	if a.console != nil {
		// The console's sketch and rates: its top clients, and the
		// decision counters sampled each second.
		c.Top = a.console.top
		a.console.sampleRates(c.Metrics)
	}
	c.ReferenceMetrics = a.obs.ref
	c.Logger = a.log
	c.Hold = rls.HoldConfig{MaxHeld: cfg.MaxHeld, Metrics: rls.NewHoldMetrics(a.reg)}
	return rls.New(c)
}

// Run serves until ctx ends, then shuts down in the order that lets
// in-flight work finish: the servers drain first (see servers.run) while
// the components they use (rule source, backend stack, overrides,
// warm-up, readiness, statsd) keep running; then those stop and are joined
// (the stack's lease layers return the leases held as they stop); only
// then are the backend stack and the Redis clients closed and the last
// spans exported. Run returns after every goroutine it started has ended,
// with the servers' error and those of components joined.
//
// A component that stops early does not end serving: it is logged, and
// the others go on with what it left (the last good rules, the last
// overrides, the last warm-up anchors), because every replica shares the
// cause (a config source, Redis, statsd) and stopping them all at once
// would turn a stale part into an outage. So the components run in a
// plain wait group, not a group that cancels its members on an error.
func (a *App) Run(ctx context.Context) error {
	defer a.close()
	// The components outlive ctx by the drain, so their context ends
	// only when the servers have returned.
	drained, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var bg sync.WaitGroup
	errs := make([]error, len(a.runs)+1)
	for i, run := range a.runs {
		bg.Go(func() { errs[i] = a.runPart(drained, run) })
	}
	// The stack's lease layers return the leases held as its Run ends, so
	// no request may take one after: its context ends when the servers
	// have returned.
	bg.Go(func() { errs[len(a.runs)] = a.runPart(drained, a.backend.stack.Run) })
	// The drain ends held requests and the RLQS streams (Envoy reopens
	// one to another replica on its next report).
	release := func() { a.svc.ReleaseHeld(); a.rlqs.Drain() }
	err := a.srv.run(ctx, release, zap.String("version", a.version),
		zap.String("backend", a.backend.stack.Name()), zap.String("default_algorithm", a.defaultAlgorithm))
	stopBG()
	bg.Wait()
	return errors.Join(err, errors.Join(errs...))
}

// runPart runs one component until ctx ends, logging an error it stops
// with before then; serving goes on (see Run).
func (a *App) runPart(ctx context.Context, run func(context.Context) error) error {
	err := run(ctx)
	_ = logStopped(ctx, a.log, "a component stopped; serving goes on without it", err)
	return err
}

// close releases what New built, in reverse order; parts not built are
// nil.
func (a *App) close() {
	if a.srv != nil {
		a.srv.closeListeners()
	}
	if a.backend != nil {
		a.backend.close()
	}
	if a.obs != nil {
		a.obs.close()
	}
}

// logStopped logs a component that stopped with an error other than the
// end of ctx, in the component's own words; it returns nil, since that is
// all Run would do with it (rules stop reloading; the last ones keep
// serving).
func logStopped(ctx context.Context, log *zap.Logger, msg string, err error) error {
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		log.Error(msg, zap.Error(err))
	}
	return nil
}

func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "envoy_rls_build_info",
		Help:        "Build information; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	g.Set(1)
	return g
}
