package xdsrules

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's: connection state, the version in force (an
// info gauge, the Prometheus way to export a string), ACKs, NACKs and
// when a push last applied (time since = time() - the gauge).
type metrics struct {
	connected  prometheus.Gauge
	version    *prometheus.GaugeVec
	acks       prometheus.Counter
	nacks      prometheus.Counter
	reconnects prometheus.Counter
	lastUpdate prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "envoy_rls_xds_" + name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "envoy_rls_xds_" + name, Help: help})
	}
	m := &metrics{
		connected: gauge("connected", "Whether the xDS stream to the management server is open (1) or not (0)."),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "envoy_rls_xds_config_info",
			Help: "The version of the xDS config in force, as the version label; the value is always 1.",
		}, []string{"version"}),
		acks:       counter("acks_total", "xDS pushes that validated, were applied and ACKed."),
		nacks:      counter("nacks_total", "xDS pushes that failed validation and were NACKed; the last good rules stayed in force."),
		reconnects: counter("reconnects_total", "Reconnection attempts to the management server after a lost or failed stream."),
		lastUpdate: gauge("last_update_timestamp_seconds", "Unix time of the last xDS push applied; time() minus it is the time since the last update."),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.version, m.acks, m.nacks, m.reconnects, m.lastUpdate)
	}
	return m
}

// applied records a push applied at version v.
func (m *metrics) applied(v string) {
	m.acks.Inc()
	m.version.Reset()
	m.version.WithLabelValues(v).Set(1)
	m.lastUpdate.SetToCurrentTime()
}
