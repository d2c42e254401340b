package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// metricsFlags configure an optional listener of its own for the
// Prometheus metrics, besides /metrics on --http-addr: envoyproxy/ratelimit
// serves them on PROMETHEUS_ADDR (:9090) at PROMETHEUS_PATH, and the
// scrape configs of its deployments point there.
type metricsFlags struct {
	addr string
	path string
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "also serve the Prometheus metrics on this address of their own (envoyproxy/ratelimit's PROMETHEUS_ADDR); empty: only /metrics on --http-addr")
	fs.StringVar(&m.path, "metrics-path", "/metrics", "path of the metrics on --metrics-addr (envoyproxy/ratelimit's PROMETHEUS_PATH)")
}

func (m *metricsFlags) validate() error {
	if !strings.HasPrefix(m.path, "/") {
		return fmt.Errorf("--metrics-path: %q must start with /", m.path)
	}
	return nil
}

// serveMetrics starts the metrics listener when --metrics-addr is set and
// returns what stops it; a listen error is returned at once, so a bad
// address stops the start like the other listeners'.
func serveMetrics(cfg *serveConfig, reg *prometheus.Registry, log *zap.Logger) (stop func(), err error) {
	if cfg.metrics.addr == "" {
		return func() {}, nil
	}
	l, err := cfg.http.listen("metrics-addr", cfg.metrics.addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(cfg.metrics.path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := cfg.http.server(mux, log)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", zap.Error(err))
		}
	}()
	log.Info("serving metrics", zap.String("metrics_addr", l.Addr().String()), zap.String("path", cfg.metrics.path))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// prometheusAddr maps USE_PROMETHEUS and PROMETHEUS_ADDR: the reference
// serves the listener only when USE_PROMETHEUS is true, on :9090 unless
// PROMETHEUS_ADDR says otherwise.
func prometheusAddr(get lookupFunc) (string, bool, error) {
	on, err := isTrue(get, "USE_PROMETHEUS")
	if err != nil || !on {
		return "", false, err
	}
	return value(get, "PROMETHEUS_ADDR", ":9090"), true, nil
}

// prometheusPath maps PROMETHEUS_PATH, read only with USE_PROMETHEUS.
func prometheusPath(get lookupFunc) (string, bool, error) {
	on, err := isTrue(get, "USE_PROMETHEUS")
	if err != nil || !on {
		return "", false, err
	}
	return value(get, "PROMETHEUS_PATH", "/metrics"), true, nil
}
