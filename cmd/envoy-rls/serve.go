package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/envoy-rls/envoy-rls/pkg/admin"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/override"
	"github.com/envoy-rls/envoy-rls/pkg/readiness"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

// serveConfig holds the serve command's flags.
type serveConfig struct {
	configDir        string
	grpcAddr         string
	httpAddr         string
	redisURL         string
	defaultAlgorithm string
	logLevel         string
	logFormat        string
	shadowMode       bool
	headers          string
	slidingLogCap    int
	mergeDomains     bool
	memstoreMaxKeys  int
	pprof            bool
	shutdownDelay    time.Duration
	shutdownTimeout  time.Duration
	limits           rls.RequestLimits
	maxRequestCost   int64
	limitOverrides   string
	referenceMetrics bool
	nearLimitRatio   float64
	countDeniedHits  bool
	redis            redisFlags
	tls              tlsFlags
	http             httpFlags
	// legacyHeaderNames and refNotes: see refenv.go.
	legacyHeaderNames string
	refNotes          []refNote
	metrics           metricsFlags
	grpc              grpcFlags
	xds               xdsFlags
	override          overrideFlags
	statsd            statsdFlags
	tracing           tracingFlags
	hold              holdFlags

	// dropInFlag is --drop-in; dropIn what it resolved to (dropin.go).
	dropInFlag string
	dropIn     dropIn
}

func serveFlags(stderr io.Writer, env environment) (*serveConfig, func([]string) error) {
	c, fs := serveFlagSet("serve", stderr)
	return c, func(args []string) error { return c.parse(fs, args, 0, env) }
}

// serveFlagSet defines serve's flags on a flag set for the command name:
// serve's, and validate's, which takes the same ones.
func serveFlagSet(name string, stderr io.Writer) (*serveConfig, *flag.FlagSet) {
	c := &serveConfig{}
	fs := newFlagSet(name, stderr)
	fs.StringVar(&c.configDir, "config-dir", "/etc/envoy-rls/config", "directory of rule files (*.yaml, *.yml; in drop-in mode every file under it), watched for changes")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (RateLimitService, health, reflection): host:port, or unix:///path for a Unix domain socket")
	fs.StringVar(&c.httpAddr, "http-addr", ":8080", "HTTP listen address (/healthz, /readyz, /healthcheck, /metrics, /json)")
	fs.StringVar(&c.redisURL, "redis-url", "", "Redis URL: redis://, rediss://, redis+sentinel://, redis+cluster://; empty runs on the in-process store")
	fs.StringVar(&c.defaultAlgorithm, "default-algorithm", "sliding_window", "algorithm for rules that name none: "+algo.AlgorithmNames())
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug|info|warn|error")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json|console")
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "answer OK to every request while still counting and reporting would-be denials")
	fs.StringVar(&c.headers, "response-headers", "none", "rate-limit headers to add: comma list of draft|legacy|retry-after, or all|none")
	fs.IntVar(&c.slidingLogCap, "sliding-log-cap", int(algo.DefaultSlidingLogCap), "largest requests_per_unit a sliding_log rule or per-request limit override may have (its memory is O(limit))")
	fs.BoolVar(&c.mergeDomains, "merge-domain-config", false, "let several rule files define one domain, their top-level descriptors joined in file name order (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); a top-level key and value in two of them is still refused")
	fs.IntVar(&c.memstoreMaxKeys, "memstore-max-keys", 1_000_000, "most keys the in-process store holds (also the local failure mode's); when full, expired keys go first, then the live key expiring soonest, whose client may then get one more full limit (counted in envoy_rls_memstore_evictions_total); 0: no bound")
	fs.BoolVar(&c.pprof, "pprof", false, "serve /debug/pprof on the debug address (--debug-addr)")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 0, "after SIGTERM, keep serving with /readyz failing for this long so load balancers notice")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "longest wait for in-flight requests to finish at shutdown")
	fs.IntVar(&c.limits.MaxDescriptors, "max-descriptors", rls.DefaultRequestLimits.MaxDescriptors, "most descriptors one request may carry")
	fs.IntVar(&c.limits.MaxEntries, "max-entries", rls.DefaultRequestLimits.MaxEntries, "most entries one descriptor may carry")
	fs.IntVar(&c.limits.MaxKeyBytes, "max-key-bytes", rls.DefaultRequestLimits.MaxKeyBytes, "longest descriptor entry key in bytes")
	fs.IntVar(&c.limits.MaxValueBytes, "max-value-bytes", rls.DefaultRequestLimits.MaxValueBytes, "longest descriptor entry value (and domain) in bytes")
	fs.Int64Var(&c.maxRequestCost, "max-request-cost", algo.DefaultMaxCost, "most state writes one request may cause: one per limit, plus one per hit on a sliding_log limit; a costlier request gets INVALID_ARGUMENT before anything is written, and no merged Redis script call carries more")
	fs.StringVar(&c.limitOverrides, "limit-overrides", rls.OverridesAllow.String(), "what a descriptor's own limit override (from Envoy request metadata) may do: allow (replace the configured limit, as envoyproxy/ratelimit does) | lower-only (only a limit no looser than the matched rule's) | ignore")
	fs.BoolVar(&c.countDeniedHits, "count-denied-hits", false, "count the hits of a denied request on its fixed_window limits, as envoyproxy/ratelimit does by default (its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false), so clients that keep sending while blocked use up their other limits and stay blocked; by default a denied request consumes nothing")
	fs.BoolVar(&c.referenceMetrics, "reference-metrics", false, "also export envoyproxy/ratelimit's counters on /metrics, named and labelled as its Prometheus exporter does, for dashboards built on it: per limit ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode}, per call ratelimit_service_{total_requests,response_time_seconds,should_rate_limit_error}, per rule load ratelimit_service_config_load_{success,error} (USE_PROMETHEUS=true)")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", 0.8, "with --reference-metrics, the share of a limit above which hits count as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO); in (0, 1]")
	fs.StringVar(&c.dropInFlag, "drop-in", dropInAuto, "envoyproxy/ratelimit's defaults (fixed_window, every file under --config-dir read with RUNTIME_IGNOREDOTFILES, a missing requests_per_unit read as 0, /srv/runtime_data/current/config when nothing names the rule directory): on | off | auto (on when started as "+refName+" or when RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or RUNTIME_APPDIRECTORY set the rule directory); flags given still win")
	fs.StringVar(&c.legacyHeaderNames, "legacy-header-names", strings.Join(rls.DefaultLegacyNames[:], ","), "names of the legacy headers (--response-headers=legacy): limit,remaining,reset")
	c.redis.register(fs)
	c.tls.register(fs)
	c.http.register(fs)
	c.metrics.register(fs)
	c.grpc.register(fs)
	c.xds.register(fs)
	c.override.register(fs)
	c.statsd.register(fs)
	c.tracing.register(fs)
	c.hold.register(fs)
	return c, fs
}

func serve(env environment, args []string, stderr io.Writer) int {
	cfg, parse := serveFlags(stderr, env)
	if err := parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls serve: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg.logLevel, cfg.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls serve: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	logRefNotes(log, cfg.refNotes)
	logDropIn(log, cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runServer(ctx, cfg, log); err != nil {
		// One line either way: the error says what is wrong and where.
		var se startError
		if errors.As(err, &se) {
			printStartError(stderr, se.err)
			return 1
		}
		log.Error("envoy-rls stopped", zap.Error(err))
		return 1
	}
	return 0
}

// startError is a failure before the server began serving: a bad flag,
// rule directory or address. Nothing was served, so nothing was "kept".
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "console":
		zc = zap.NewDevelopmentConfig()
	default:
		return nil, fmt.Errorf("--log-format: unknown format %q (want json|console)", format)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	// Errors here are about configuration and the network, and carry their
	// context in the message; a Go stack trace only buries it.
	zc.DisableStacktrace = true
	return zc.Build()
}

// readinessInterval is how often readiness is re-evaluated between probes,
// so that gRPC health watchers follow a backend that fails or recovers.
const readinessInterval = 2 * time.Second

// serveOptions are the serve flags that parse into values.
type serveOptions struct {
	rules            rules.Options
	defaultAlgorithm algo.Algorithm
	headers          rls.HeaderOptions
	overrides        rls.OverridePolicy
	failureMode      failover.Mode
}

// rulesOptions parses and checks the rule flags, for serve and validate
// alike: a directory that validates is one serve loads.
func (c *serveConfig) rulesOptions() (rules.Options, error) {
	alg, err := algo.ParseAlgorithm(c.defaultAlgorithm)
	if err != nil {
		return rules.Options{}, fmt.Errorf("--default-algorithm: %w", err)
	}
	if err := algo.ValidateSlidingLogCap(int64(c.slidingLogCap)); err != nil {
		return rules.Options{}, fmt.Errorf("--sliding-log-cap: %w", err)
	}
	if err := c.hold.check(); err != nil {
		return rules.Options{}, err
	}
	return rules.Options{DefaultAlgorithm: alg, SlidingLogCap: int64(c.slidingLogCap), MergeDomains: c.mergeDomains, MaxDelay: c.hold.maxDelay,
		Files: c.dropIn.files, ZeroMissingRequestsPerUnit: c.dropIn.on}, nil
}

// check parses and checks every flag, naming the flag in each error.
func (c *serveConfig) check() (serveOptions, error) {
	var o serveOptions
	var err error
	if o.rules, err = c.rulesOptions(); err != nil {
		return o, err
	}
	o.defaultAlgorithm = o.rules.DefaultAlgorithm
	if o.headers, err = rls.ParseHeaderOptions(c.headers); err != nil {
		return o, fmt.Errorf("--response-headers: %w", err)
	}
	if o.headers.LegacyNames, err = rls.ParseLegacyNames(c.legacyHeaderNames); err != nil {
		return o, fmt.Errorf("--legacy-header-names: %w", err)
	}
	if c.maxRequestCost < 1 {
		return o, fmt.Errorf("--max-request-cost: %d must be at least 1", c.maxRequestCost)
	}
	if o.overrides, err = rls.ParseOverridePolicy(c.limitOverrides); err != nil {
		return o, fmt.Errorf("--limit-overrides: %w", err)
	}
	if !(c.nearLimitRatio > 0 && c.nearLimitRatio <= 1) {
		return o, fmt.Errorf("--near-limit-ratio: %v must be above 0 and at most 1", c.nearLimitRatio)
	}
	if c.memstoreMaxKeys < 0 {
		return o, fmt.Errorf("--memstore-max-keys: %d must be 0 (no bound) or positive", c.memstoreMaxKeys)
	}
	if o.failureMode, err = c.redis.validate(); err != nil {
		return o, err
	}
	if err := c.metrics.validate(); err != nil {
		return o, err
	}
	if c.redis.perSecondURL != "" && c.redisURL == "" {
		return o, errors.New("--redis-persecond-url: needs --redis-url (the Redis of the longer limits)")
	}
	if err := c.grpc.validate(); err != nil {
		return o, err
	}
	if err := c.xds.validate(); err != nil {
		return o, err
	}
	if err := c.override.validate(); err != nil {
		return o, err
	}
	if _, _, err := c.statsd.options(nil); err != nil {
		return o, err
	}
	if err := c.tracing.validate(); err != nil {
		return o, err
	}
	return o, c.http.validate()
}

func runServer(ctx context.Context, cfg *serveConfig, log *zap.Logger) (err error) {
	serving := false
	defer func() {
		if err != nil && !serving {
			err = startError{err}
		}
	}()
	opts, err := cfg.check()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(buildInfo())

	obs, err := startObservability(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer obs.close()
	refMetrics := obs.referenceMetrics(cfg, reg)
	if refMetrics != nil {
		opts.rules.OnReload = chainReload(opts.rules.OnReload, refMetrics.ConfigLoaded)
	}
	src, err := startRules(ctx, cfg, opts.rules, log, reg)
	if err != nil {
		return err
	}
	obs.run(ctx, refMetrics)
	backend, closeBackend, err := newBackend(ctx, cfg, opts.failureMode, log, reg)
	if err != nil {
		return err
	}
	defer closeBackend()
	overrides, err := newOverrides(ctx, cfg, backend, log, reg)
	if err != nil {
		return err
	}
	svc, err := rls.New(rls.Config{
		// A warm-up ramp first, then the overrides: a factor scales the
		// ramped limit, an absolute value replaces whatever came before.
		Adjust:           []rls.LimitAdjuster{newWarmup(ctx, backend, cfg.redis.keyPrefix, log), overrides},
		Rules:            src.current,
		Backend:          obs.backend(backend, cfg.redisURL != ""),
		Tracer:           obs.requestTracer(),
		DefaultAlgorithm: opts.defaultAlgorithm,
		ShadowMode:       cfg.shadowMode,
		CountDeniedHits:  cfg.countDeniedHits,
		Headers:          opts.headers,
		Limits:           cfg.limits,
		MaxRequestCost:   cfg.maxRequestCost,
		SlidingLogCap:    int64(cfg.slidingLogCap),
		Overrides:        opts.overrides,
		Metrics:          rls.NewMetrics(reg),
		ReferenceMetrics: refMetrics,
		Logger:           log,
		Hold:             cfg.hold.config(reg),
	})
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		if err := src.ready(ctx); err != nil {
			return err
		}
		return backend.Ready(ctx)
	}
	explainer := explainHandler(cfg, svc, backend, src.current)
	srv, err := newServers(ctx, cfg, svc, ready, src.current, explainer, overrides, reg, log)
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(cfg, reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	debugTLS, err := cfg.override.debugTLS(log)
	if err != nil {
		return err
	}
	gl, hl, dl, err := listen(cfg)
	if err != nil {
		return err
	}
	if dl != nil && debugTLS != nil {
		dl = tls.NewListener(dl, debugTLS)
	}
	serving = true
	return srv.run(ctx, cfg, gl, hl, dl, backend.Name(), opts.defaultAlgorithm)
}

// servers are the three servers of serve and the readiness they share.
type servers struct {
	grpc   *grpc.Server
	http   *http.Server
	debug  *http.Server
	health *health.Server
	ready  *readiness.Tracker
	log    *zap.Logger
	// release ends the service's held requests (rls.Service.ReleaseHeld).
	release func()
}

// newServers builds the gRPC server (the service, health, reflection), the
// HTTP server and the debug server; ready is the backend's readiness,
// rulesNow the rules /debug/config and /rlconfig show, explainer serves
// /debug/explain, and overrides are the runtime overrides the admin API
// manages.
func newServers(ctx context.Context, cfg *serveConfig, svc *rls.Service, ready func(context.Context) error, rulesNow func() *rules.Snapshot, explainer http.Handler, overrides *override.Table, reg *prometheus.Registry, log *zap.Logger) (*servers, error) {
	creds, err := cfg.tls.serverOption(log)
	if err != nil {
		return nil, err
	}
	gopts := cfg.grpc.serverOptions()
	if creds != nil {
		gopts = append(gopts, creds)
	}
	s := &servers{grpc: grpc.NewServer(gopts...), health: health.NewServer(), log: log, release: svc.ReleaseHeld}
	svc.Register(s.grpc)
	s.ready = newReadiness(ctx, ready, s.health, log)
	healthpb.RegisterHealthServer(s.grpc, healthService{Server: s.health, ready: s.ready})
	reflection.Register(s.grpc)
	go s.ready.Run(ctx, readinessInterval)

	s.http = cfg.http.server(admin.New(admin.Options{
		Ready:   s.ready.Check,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		JSON:    svc.JSONHandler(),
	}), log)
	s.debug = cfg.http.server(admin.NewDebug(admin.DebugOptions{
		Config:         func() any { return debugConfig(rulesNow(), overrides, svc) },
		RLConfig:       func(w io.Writer) error { return rulesNow().WriteRLConfig(w) },
		Pprof:          cfg.pprof,
		Explain:        explainer,
		Admin:          override.Handler(overrides, rulesNow),
		AdminTokenFile: cfg.override.tokenFile,
	}), log)
	return s, nil
}

// run serves on the listeners (dl may be nil) until ctx ends or a server
// fails, then shuts down (see shutdown).
func (s *servers) run(ctx context.Context, cfg *serveConfig, gl, hl, dl net.Listener, backend string, defAlgo algo.Algorithm) error {
	errs := make(chan error, 3)
	go func() { errs <- s.grpc.Serve(gl) }()
	go func() { errs <- s.http.Serve(hl) }()
	debugAddr := "off"
	if dl != nil {
		debugAddr = dl.Addr().String()
		go func() { errs <- s.debug.Serve(dl) }()
	}
	s.log.Info("envoy-rls serving",
		zap.String("version", version),
		zap.String("grpc_addr", grpcAddrString(gl)),
		zap.String("http_addr", hl.Addr().String()),
		zap.String("debug_addr", debugAddr),
		zap.String("backend", backend),
		zap.String("default_algorithm", defAlgo.String()))

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining")
	case serveErr = <-errs:
		s.log.Error("server failed", zap.Error(serveErr))
	}
	s.shutdown(cfg, serveErr == nil)
	return serveErr
}

// shutdown fails readiness, waits --shutdown-delay (when delay) so load
// balancers notice, drains in-flight RPCs for at most --shutdown-timeout,
// then stops the HTTP servers.
func (s *servers) shutdown(cfg *serveConfig, delay bool) {
	s.ready.Drain()
	s.health.Shutdown()
	if cfg.shutdownDelay > 0 && delay {
		time.Sleep(cfg.shutdownDelay)
	}
	// Held requests (on_limit: delay) are answered now, not at their
	// reserved time, so the drain below does not wait for them.
	s.release()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(cfg.shutdownTimeout):
		s.log.Warn("in-flight requests did not finish in time; closing them", zap.Duration("timeout", cfg.shutdownTimeout))
		s.grpc.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	_ = s.http.Shutdown(sctx)
	// Debug requests are not traffic to drain; a profile may run for long.
	_ = s.debug.Close()
	s.log.Info("envoy-rls stopped")
}

// listen opens the gRPC, HTTP and debug listeners (debug is nil when
// --debug-addr is empty), or none of them.
func listen(cfg *serveConfig) (grpcL, httpL, debugL net.Listener, err error) {
	grpcL, err = listenGRPC(cfg.grpcAddr)
	if err != nil {
		return nil, nil, nil, err
	}
	httpL, err = cfg.http.listen("http-addr", cfg.httpAddr)
	if err != nil {
		grpcL.Close()
		return nil, nil, nil, err
	}
	if cfg.http.debugAddr != "" {
		if debugL, err = cfg.http.listen("debug-addr", cfg.http.debugAddr); err != nil {
			grpcL.Close()
			httpL.Close()
			return nil, nil, nil, err
		}
	}
	return grpcL, httpL, debugL, nil
}

// newReadiness returns the one readiness answer for /readyz, /healthcheck
// and gRPC health (the server, the rate-limit service and "ratelimit"): not draining, and check (the rule source's first
// config, then the backend stack's Ready) passing. It publishes every flip to the gRPC health server, so watchers
// follow too, and logs it.
func newReadiness(ctx context.Context, check func(context.Context) error, hs *health.Server, log *zap.Logger) *readiness.Tracker {
	return readiness.New(ctx, readiness.Options{
		Check: check,
		OnChange: func(err error) {
			st := healthpb.HealthCheckResponse_SERVING
			switch {
			case errors.Is(err, readiness.ErrDraining):
				st = healthpb.HealthCheckResponse_NOT_SERVING
				log.Info("not ready", zap.Error(err))
			case err != nil:
				st = healthpb.HealthCheckResponse_NOT_SERVING
				log.Warn("not ready", zap.Error(err))
			default:
				log.Info("ready")
			}
			hs.SetServingStatus("", st)
			hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, st)
			// The name envoyproxy/ratelimit registers, which its users'
			// probes (grpc_health_probe -service=ratelimit) ask for.
			hs.SetServingStatus(refName, st)
		},
	})
}

// healthService is the gRPC health service. Check evaluates readiness as
// /readyz does, so both answer alike at any moment; Watch and List follow
// the statuses readiness publishes (on each evaluation, at least every
// readinessInterval).
type healthService struct {
	*health.Server
	ready *readiness.Tracker
}

// Check re-evaluates readiness, which publishes any flip to the embedded
// server before it answers.
func (h healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	_ = h.ready.Check(ctx)
	return h.Server.Check(ctx, req)
}

// newBackend builds the backend stack the flags describe: the in-process
// store, or Redis behind the deny cache and the failure policy. close stops
// the stack and closes its Redis client.
func newBackend(ctx context.Context, cfg *serveConfig, mode failover.Mode, log *zap.Logger, reg prometheus.Registerer) (*stack.Stack, func(), error) {
	sc := cfg.redis.stackConfig(mode)
	sc.MaxCallCost, sc.MemstoreMaxKeys, sc.Logger, sc.Registerer = cfg.maxRequestCost, cfg.memstoreMaxKeys, log, reg
	closeClient := func() {
		if sc.Redis != nil {
			sc.Redis.Close()
		}
		if sc.PerSecondRedis != nil {
			sc.PerSecondRedis.Close()
		}
	}
	if cfg.redisURL != "" {
		client, err := newRedisClient(cfg, log)
		if err != nil {
			return nil, nil, err
		}
		sc.Redis = client
	}
	if cfg.redis.perSecondURL != "" {
		client, err := newRedisClientFor("--redis-persecond-url", cfg.redis.perSecondURL, cfg, log)
		if err != nil {
			closeClient()
			return nil, nil, err
		}
		sc.PerSecondRedis = client
	}
	st, err := stack.New(ctx, sc)
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	return st, func() { st.Close(); closeClient() }, nil
}

func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "envoy_rls_build_info",
		Help:        "Build information; the value is always 1.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	g.Set(1)
	return g
}
