package serveconfig

import (
	"fmt"
	"strings"

	flag "github.com/spf13/pflag"
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
