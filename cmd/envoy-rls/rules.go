package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

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

// loadRules loads the rule directory once, failing when it cannot be read,
// holds a bad file or defines no rule (the loader's policy), and returns
// the loader to watch it with.
func loadRules(dir string, opts rules.Options, log *zap.Logger, reg prometheus.Registerer) (*rules.Loader, error) {
	metrics := newReloadMetrics(reg)
	opts.Logger, opts.OnReload = log, chainReload(metrics.observe, opts.OnReload)
	loader := rules.NewLoader(dir, opts)
	if err := loader.Load(); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	return loader, nil
}
