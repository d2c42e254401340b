// Package serveconfig turns serve's settings into an app.Config: it
// defines serve's flags (which validate, explain and inspect take too, so
// that a Deployment's command line and environment mean the same to
// them), reads their ENVOY_RLS_* twins and, through internal/dropin,
// envoyproxy/ratelimit's variables, checks every value, naming the flag of
// a bad one, and builds the configuration internal/app wires. It builds
// nothing itself and serves nothing: it must not import internal/cli or
// internal/clients, and it starts no server, client or goroutine.
package serveconfig

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	flag "github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Settings hold the serve command's flags, and what the environment set
// in them.
type Settings struct {
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
	// legacyHeaderNames: see internal/dropin's refenv.go; refNotes are
	// the start-up notes about envoyproxy/ratelimit's variables.
	legacyHeaderNames string
	refNotes          []dropin.Note
	metrics           metricsFlags
	grpc              grpcFlags
	xds               xdsFlags
	override          adminFlags
	rlqs              rlqsFlags
	statsd            statsdFlags
	tracing           tracingFlags
	hold              holdFlags
	console           consoleFlags

	// dropInFlag is --drop-in; dropIn what it resolved to (internal/dropin).
	dropInFlag string
	dropIn     dropin.Mode
}

// New defines serve's flags on a flag set for the command name: serve's,
// and those of validate, explain and inspect, which take the same ones.
// Parse the flag set (cobra does), then call Finish.
func New(name string) (*Settings, *flag.FlagSet) {
	c := &Settings{}
	fs := flagenv.NewFlagSet(name)
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
	fs.BoolVar(&c.countDeniedHits, "count-denied-hits", false, "make cost: charge the default of every limit that names no cost: every hit is counted, a denied request's and a charge past the limit included, as envoyproxy/ratelimit counts by default (its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false); on in drop-in mode unless that variable is true. By default a denied request consumes nothing (cost: request)")
	fs.BoolVar(&c.referenceMetrics, "reference-metrics", false, "also export envoyproxy/ratelimit's counters on /metrics, named and labelled as its Prometheus exporter does, for dashboards built on it: per limit ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode}, per call ratelimit_service_{total_requests,response_time_seconds,should_rate_limit_error}, per rule load ratelimit_service_config_load_{success,error} (USE_PROMETHEUS=true)")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", 0.8, "with --reference-metrics, the share of a limit above which hits count as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO); in (0, 1]")
	fs.StringVar(&c.dropInFlag, "drop-in", dropin.Auto, "envoyproxy/ratelimit's defaults (fixed_window, every file under --config-dir read with RUNTIME_IGNOREDOTFILES, a missing requests_per_unit read as 0, /srv/runtime_data/current/config when nothing names the rule directory): on | off | auto (on when started as "+dropin.RefName+" or when RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or RUNTIME_APPDIRECTORY set the rule directory); flags given still win")
	fs.StringVar(&c.legacyHeaderNames, "legacy-header-names", strings.Join(rls.DefaultLegacyNames[:], ","), "names of the legacy headers (--response-headers=legacy): limit,remaining,reset")
	c.redis.register(fs)
	c.tls.register(fs)
	c.http.register(fs)
	c.metrics.register(fs)
	c.grpc.register(fs)
	c.xds.register(fs)
	c.override.register(fs)
	c.rlqs.register(fs)
	c.statsd.register(fs)
	c.tracing.register(fs)
	c.hold.register(fs)
	c.console.register(fs)
	return c, fs
}

// Finish reads what serve and the commands that take its flags read
// after the command line cobra parsed into fs, in precedence order: the
// ENVOY_RLS_* twins of the flags not given, envoyproxy/ratelimit's
// variables, then drop-in mode.
func (c *Settings) Finish(fs *flag.FlagSet, env flagenv.Env) error {
	if err := flagenv.ApplyTwins(fs, env.Lookup); err != nil {
		return err
	}
	return c.applyEnv(fs, env)
}

// applyEnv applies the reference's variables and drop-in mode to flags
// already parsed.
func (c *Settings) applyEnv(fs *flag.FlagSet, env flagenv.Env) error {
	var err error
	c.dropIn, c.refNotes, err = dropin.Apply(fs, env)
	return err
}

// LogEnv logs, at start, what envoyproxy/ratelimit's variables did and
// drop-in mode.
func (c *Settings) LogEnv(log *zap.Logger) {
	dropin.LogNotes(log, c.refNotes)
	c.dropIn.Log(log, c.defaultAlgorithm, c.configDir)
}

// DropIn is what --drop-in resolved to.
func (c *Settings) DropIn() dropin.Mode { return c.dropIn }

// ConfigDir is --config-dir.
func (c *Settings) ConfigDir() string { return c.configDir }

// DefaultAlgorithm is --default-algorithm, as given or as drop-in mode
// set it.
func (c *Settings) DefaultAlgorithm() string { return c.defaultAlgorithm }

// Logger is the logger --log-level and --log-format describe.
func (c *Settings) Logger() (*zap.Logger, error) {
	return newLogger(c.logLevel, c.logFormat)
}

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

// CheckRuleDir explains a rule directory that is not there, the first
// thing a newcomer running serve with no flags meets: how to point serve
// at one.
func (c *Settings) CheckRuleDir() error {
	if c.xds.source == sourceXDS {
		return nil
	}
	if _, err := os.Stat(c.configDir); errors.Is(err, os.ErrNotExist) {
		return NoRuleDir(c.configDir, "serve at one with --config-dir DIR (or ENVOY_RLS_CONFIG_DIR)", "serve --config-dir examples/config")
	}
	return nil
}

// NoRuleDir is the error of a --config-dir that is not there, for serve
// and validate alike: how to point the command at one (how), and an
// example command line that works in a checkout.
func NoRuleDir(dir, how, example string) error {
	return fmt.Errorf("--config-dir: no rule directory at %s; point %s, e.g. bin/envoy-rls %s in a checkout of envoy-rls (make run does it)", dir, how, example)
}

// serveOptions are the serve flags that parse into values.
type serveOptions struct {
	rules            rules.Options
	defaultAlgorithm algo.Algorithm
	headers          rls.HeaderOptions
	overrides        rls.OverridePolicy
	failureMode      failover.Mode
}

// RulesOptions parses and checks the rule flags, for serve and validate
// alike: a directory that validates is one serve loads.
func (c *Settings) RulesOptions() (rules.Options, error) {
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
		Files: c.dropIn.Files, ZeroMissingRequestsPerUnit: c.dropIn.On, DefaultCharge: c.countDeniedHits}, nil
}

// check parses and checks every flag, naming the flag in each error.
func (c *Settings) check() (serveOptions, error) {
	var o serveOptions
	var err error
	if o.rules, err = c.RulesOptions(); err != nil {
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
	if _, _, err := c.statsd.options(); err != nil {
		return o, err
	}
	if err := c.tracing.validate(); err != nil {
		return o, err
	}
	return o, c.http.validate()
}

// AppConfig checks every flag and builds the app's Config from them, for
// the binary of version, logging to log.
func (c *Settings) AppConfig(log *zap.Logger, version string) (app.Config, error) {
	opts, err := c.check()
	if err != nil {
		return app.Config{}, err
	}
	ac := app.Config{Logger: log, Version: version}
	ac.Rules = app.RulesConfig{Options: opts.rules, Dir: c.configDir}
	if c.xds.source == sourceXDS {
		if ac.Rules.XDS, err = c.xds.config(opts.rules); err != nil {
			return ac, err
		}
	}
	if ac.Backend, err = c.backendConfig(opts.failureMode); err != nil {
		return ac, err
	}
	ac.Service = app.ServiceConfig{MaxHeld: c.hold.maxHeld, Service: rls.Config{
		DefaultAlgorithm: opts.defaultAlgorithm,
		ShadowMode:       c.shadowMode,
		DefaultCharge:    c.countDeniedHits,
		Headers:          opts.headers,
		Limits:           c.limits,
		MaxRequestCost:   c.maxRequestCost,
		SlidingLogCap:    int64(c.slidingLogCap),
		Overrides:        opts.overrides,
	}}
	ac.Overrides = app.OverridesConfig{Refresh: c.override.refresh, MaxTTL: c.override.maxTTL,
		AdaptiveFile: c.override.adaptiveConfig, PrometheusURL: c.override.prometheusURL}
	if ac.RLQS, err = c.rlqs.config(); err != nil {
		return ac, err
	}
	if ac.Observe, err = c.observeConfig(); err != nil {
		return ac, err
	}
	ac.Console = c.console.config()
	ac.Servers, err = c.serversConfig()
	return ac, err
}

// serversConfig is the listeners' part of the app's Config.
func (c *Settings) serversConfig() (app.ServersConfig, error) {
	grpcTLS, err := c.tls.files()
	if err != nil {
		return app.ServersConfig{}, err
	}
	debugTLS, err := c.override.debugTLS()
	if err != nil {
		return app.ServersConfig{}, err
	}
	return app.ServersConfig{
		GRPCAddr: c.grpcAddr, HTTPAddr: c.httpAddr, DebugAddr: c.http.debugAddr,
		MetricsAddr: c.metrics.addr, MetricsPath: c.metrics.path,
		GRPCOptions: c.grpc.serverOptions(), GRPCTLS: grpcTLS, DebugTLS: debugTLS,
		HTTP: c.http.limits(), Pprof: c.pprof, AdminTokenFile: c.override.tokenFile,
		ShutdownDelay: c.shutdownDelay, ShutdownTimeout: c.shutdownTimeout,
	}, nil
}
