package app

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

// rulesSource is where the server's rules come from: the snapshot in
// force, why the server must not take traffic yet (nil: it may), and what
// keeps the rules current.
type rulesSource struct {
	current func() *rules.Snapshot
	ready   func(context.Context) error
	run     func(context.Context) error
}

// newRules loads the rules from the source cfg chooses. A rule directory
// must load at start; an xDS source starts empty and makes the server
// unready until its first push (unless ForceStart). Every load and reload
// is counted in the reload metrics and told to onReload (which may be nil).
func newRules(cfg RulesConfig, onReload func(error), log *zap.Logger, reg prometheus.Registerer) (*rulesSource, error) {
	opts := cfg.Options
	opts.Logger = log // for the parser's warnings (Options.Warn)
	opts.OnReload = chainReload(opts.OnReload, onReload)
	observe := chainReload(newReloadMetrics(reg).observe, opts.OnReload)
	if cfg.XDS != nil {
		xc := *cfg.XDS
		xc.Rules, xc.OnUpdate, xc.Logger, xc.Registerer = opts, observe, log, reg
		c, err := xdsrules.New(xc)
		if err != nil {
			return nil, fmt.Errorf("--xds-*: %w", err)
		}
		log.Info("rules from xDS", zap.String("server", xc.Server), zap.String("node", xc.NodeID), zap.Bool("tls", xc.TLS != nil))
		return &rulesSource{current: c.Current, ready: c.Ready, run: func(ctx context.Context) error {
			return logStopped(ctx, log, "xds config source stopped; rules will no longer update", c.Run(ctx))
		}}, nil
	}
	opts.OnReload = observe
	loader := rules.NewLoader(cfg.Dir, opts)
	if err := loader.Load(); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	return &rulesSource{
		current: loader.Current,
		ready:   func(context.Context) error { return nil },
		run: func(ctx context.Context) error {
			return logStopped(ctx, log, "rule watcher stopped; rules will no longer reload", loader.Run(ctx))
		},
	}, nil
}

// reloadMetrics counts rule reloads and, in the style of Prometheus's own
// prometheus_config_last_reload_* gauges, shows whether the last one
// worked and when one last did, so a failed push is visible (and
// alertable) while the old rules keep serving.
type reloadMetrics struct {
	reloads     *prometheus.CounterVec
	successful  prometheus.Gauge
	lastSuccess prometheus.Gauge
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_config_reloads_total",
			Help: "Rule reloads by result (success or error).",
		}, []string{"result"}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_config_last_reload_successful",
			Help: "Whether the last rule reload attempt succeeded (1) or failed and the last good rules stayed (0).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful rule load or reload.",
		}),
	}
	reg.MustRegister(m.reloads, m.successful, m.lastSuccess)
	return m
}

// observe records one load or reload attempt.
func (m *reloadMetrics) observe(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		m.successful.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.successful.Set(1)
	m.lastSuccess.SetToCurrentTime()
}

// chainReload calls both reload observers; either may be nil.
func chainReload(a, b func(error)) func(error) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(err error) { a(err); b(err) }
}
