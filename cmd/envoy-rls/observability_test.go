package main

import (
	"strings"
	"testing"
)

// TestRefEnvObservability: the reference's statsd, Prometheus and tracing
// variables set our flags as the reference reads them, Envoy Gateway's
// Deployment among them.
func TestRefEnvObservability(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"envoy gateway statsd", map[string]string{"USE_STATSD": "true", "STATSD_PORT": "9125"},
			map[string]string{"statsd-addr": "localhost:9125", "statsd-protocol": "tcp"}},
		{"statsd defaults", map[string]string{"USE_STATSD": "true"}, map[string]string{"statsd-addr": "localhost:8125"}},
		{"statsd host, tags, interval", map[string]string{"USE_STATSD": "1", "STATSD_HOST": "sd", "STATSD_PORT": "1",
			"EXTRA_TAGS": "a:1,b:2", "GOSTATS_FLUSH_INTERVAL_SECONDS": "3", "STATSD_PROTOCOL": "UDP"},
			map[string]string{"statsd-addr": "sd:1", "statsd-tags": "a:1,b:2", "statsd-flush-interval": "3s", "statsd-protocol": "udp"}},
		{"statsd off", map[string]string{"USE_STATSD": "false", "STATSD_PORT": "9125"}, map[string]string{"statsd-addr": ""}},
		{"reference prometheus names", map[string]string{"USE_PROMETHEUS": "true"}, map[string]string{"reference-metrics": "true"}},
		{"prometheus off", map[string]string{"USE_PROMETHEUS": "false"}, map[string]string{"reference-metrics": "false"}},
		{"envoy gateway tracing", map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "envoy-ratelimit",
			"TRACING_SERVICE_NAMESPACE": "envoy-gateway-system", "TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "1.0"},
			map[string]string{"tracing": "true", "tracing-service-name": "envoy-ratelimit", "tracing-service-namespace": "envoy-gateway-system",
				"tracing-service-instance-id": "pod-1", "tracing-sampling-rate": "1", "tracing-protocol": "http"}},
		{"tracing name default", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "gRPC"},
			map[string]string{"tracing-service-name": "RateLimit", "tracing-protocol": "grpc"}},
		{"tracing off", map[string]string{"TRACING_ENABLED": "false", "TRACING_SERVICE_NAME": "x"},
			map[string]string{"tracing": "false", "tracing-service-name": "envoy-rls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flagValue, _, err := refEnvRun(t, tc.env)
			if err != nil {
				t.Fatalf("applyRefEnv: %v", err)
			}
			for name, want := range tc.want {
				if got := flagValue(name); got != want {
					t.Errorf("--%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

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
		c, fs := serveFlagSet("serve")
		err := fs.Parse(tc.args)
		if err == nil {
			get := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			_, err = applyRefEnv(fs, ourFlagGiven(fs, get), get, nil)
		}
		if err == nil {
			_, err = c.check()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v args %v: error %v, want one naming %s", tc.env, tc.args, err, tc.want)
		}
	}
}
