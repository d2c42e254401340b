package serveconfig

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

func TestObservabilityFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"USE_STATSD": "true", "STATSD_PORT": "x"}, want: "STATSD_PORT"},
		{env: map[string]string{"USE_STATSD": "sure"}, want: "USE_STATSD"},
		{env: map[string]string{"GOSTATS_FLUSH_INTERVAL_SECONDS": "0"}, want: "GOSTATS_FLUSH_INTERVAL_SECONDS"},
		{env: map[string]string{"TRACING_ENABLED": "on"}, want: "TRACING_ENABLED"},
		{args: []string{"--statsd-addr", "nohost"}, want: "--statsd-addr"},
		{args: []string{"--statsd-addr", "h:1", "--statsd-protocol", "sctp"}, want: "protocol"},
		{args: []string{"--statsd-addr", "h:1", "--statsd-tags", "novalue"}, want: "--statsd-tags"},
		{args: []string{"--tracing", "--tracing-sampling-rate", "1.5"}, want: "sampling rate"},
		{args: []string{"--tracing", "--tracing-protocol", "zipkin"}, want: "protocol"},
	} {
		c, fs := New("serve")
		err := fs.Parse(tc.args)
		if err == nil {
			_, _, err = dropin.Apply(fs, flagenv.MapEnv(tc.env, "envoy-rls"))
		}
		if err == nil {
			_, err = c.check()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v args %v: error %v, want one naming %s", tc.env, tc.args, err, tc.want)
		}
	}
}
