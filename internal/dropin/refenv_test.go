package dropin_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

// refEnvRun parses serve's flags from args and env alone (no process
// environment) and returns the flag values and notes.
func refEnvRun(t *testing.T, env map[string]string, args ...string) (func(string) string, []dropin.Note, error) {
	t.Helper()
	_, fs := serveconfig.New("serve")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	notes, err := dropin.ApplyRefEnv(fs, flagenv.MapEnv(env, "envoy-rls"))
	return func(name string) string {
		f := fs.Lookup(name)
		if f == nil {
			t.Fatalf("no flag --%s", name)
		}
		return f.Value.String()
	}, notes, err
}

func TestRefEnvMapping(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want map[string]string // flag → value
	}{
		{"istio sample", map[string]string{
			"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "USE_STATSD": "false",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
		}, nil, map[string]string{"log-level": "debug", "redis-url": "redis://redis:6379", "config-dir": "/data/ratelimit/config"}},
		{"runtime defaults", map[string]string{"RUNTIME_SUBDIRECTORY": "rl"}, nil,
			map[string]string{"config-dir": "/srv/runtime_data/current/rl/config"}},
		{"runtime app directory", map[string]string{"RUNTIME_ROOT": "/r", "RUNTIME_APPDIRECTORY": "rules"}, nil,
			map[string]string{"config-dir": "/r/rules"}},
		{"listeners", map[string]string{"PORT": "9000", "GRPC_HOST": "127.0.0.1", "DEBUG_PORT": "7000"}, nil,
			map[string]string{"http-addr": "0.0.0.0:9000", "grpc-addr": "127.0.0.1:8081", "debug-addr": "0.0.0.0:7000"}},
		{"grpc uds wins", map[string]string{"GRPC_UDS": "/tmp/rl.sock", "GRPC_PORT": "1"}, nil,
			map[string]string{"grpc-addr": "unix:///tmp/rl.sock"}},
		{"redis unix socket is the reference default", map[string]string{"REDIS_URL": "/run/redis.sock", "REDIS_AUTH": "pw"}, nil,
			map[string]string{"redis-url": "unix://:pw@/run/redis.sock"}},
		{"redis cluster with user and TLS", map[string]string{
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001", "REDIS_AUTH": "u:p@ss", "REDIS_TLS": "true",
			"REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem",
		}, nil, map[string]string{"redis-url": "rediss+cluster://u:p%40ss@a:7000,b:7001", "redis-tls-ca": "/ca.pem", "redis-tls-cert": "/c.pem", "redis-tls-key": "/k.pem"}},
		{"redis TLS files need REDIS_TLS", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "h:1", "REDIS_TLS_CACERT": "/ca.pem"}, nil,
			map[string]string{"redis-url": "redis://h:1", "redis-tls-ca": ""}},
		{"redis sentinel", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "sp"}, nil,
			map[string]string{"redis-url": "redis+sentinel://s1:26379,s2:26379/mymaster?sentinel_password=sp"}},
		{"per-second redis", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "m:1", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "s:2"}, nil,
			map[string]string{"redis-url": "redis://m:1", "redis-persecond-url": "redis://s:2"}},
		{"per-second redis off", map[string]string{"REDIS_PERSECOND": "false", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "s:2"}, nil,
			map[string]string{"redis-persecond-url": ""}},
		{"behaviour", map[string]string{
			"SHADOW_MODE": "true", "CACHE_KEY_PREFIX": "team-a:", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576",
			"LOG_FORMAT": "text", "LOG_LEVEL": "WARN", "REDIS_POOL_SIZE": "20", "REDIS_TIMEOUT": "10s",
		}, nil, map[string]string{
			"shadow-mode": "true", "redis-key-prefix": "team-a:", "redis-deny-cache-entries": "4096",
			"log-format": "console", "log-level": "warn", "redis-pool-size": "20", "redis-timeout": "10s",
		}},
		{"reference counting", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false", "NEAR_LIMIT_RATIO": "0.9"}, nil,
			map[string]string{"count-denied-hits": "true", "near-limit-ratio": "0.9"}},
		{"stop counting", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, nil,
			map[string]string{"count-denied-hits": "false"}},
		{"prometheus listener", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:9999"}, nil,
			map[string]string{"metrics-addr": "127.0.0.1:9999", "metrics-path": "/metrics"}},
		{"prometheus default address", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "/prom"}, nil,
			map[string]string{"metrics-addr": ":9090", "metrics-path": "/prom"}},
		{"prometheus off", map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": ":1"}, nil,
			map[string]string{"metrics-addr": ""}},
		{"domain merging", map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, nil, map[string]string{"merge-domain-config": "true"}},
		{"local cache off", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "0"}, nil, map[string]string{"redis-deny-cache-entries": "0"}},
		{"headers with reference names", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"}, nil,
			map[string]string{"response-headers": "legacy", "legacy-header-names": "RateLimit-Limit,RateLimit-Remaining,X-Reset"}},
		{"grpc server TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_CACERT": "/ca"}, nil,
			map[string]string{"grpc-tls-cert": "/c", "grpc-tls-key": "/k", "grpc-tls-client-ca": "/ca"}},
		{"xds source", map[string]string{
			"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "cp:18000", "CONFIG_GRPC_XDS_NODE_ID": "rls",
			"CONFIG_GRPC_XDS_NODE_METADATA": "zone:a", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:t",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/k", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "cp.local",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.2",
			"XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1024", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		}, nil, map[string]string{
			"config-source": "xds", "xds-server": "cp:18000", "xds-node-id": "rls", "xds-node-metadata": "zone:a", "xds-headers": "x-token:t",
			"xds-tls": "true", "xds-tls-ca": "/ca", "xds-tls-cert": "/c", "xds-tls-key": "/k", "xds-tls-san": "cp.local",
			"xds-backoff-initial": "2s", "xds-backoff-max": "20s", "xds-backoff-random-factor": "0.2", "xds-backoff-jitter": "false",
			"xds-max-msg-size": "1024", "xds-force-start": "true",
		}},
		{"xds TLS files need USE_TLS", map[string]string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca"}, nil, map[string]string{"xds-tls-ca": ""}},
		{"file source", map[string]string{"CONFIG_TYPE": "FILE"}, nil, map[string]string{"config-source": "file"}},
		{"our command line wins", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "ref:1", "LOG_LEVEL": "debug"}, []string{"--redis-url", "redis://ours:2"},
			map[string]string{"redis-url": "redis://ours:2", "log-level": "debug"}},
		{"our env twin wins", map[string]string{"LOG_LEVEL": "debug", "ENVOY_RLS_LOG_LEVEL": "error"}, nil,
			// The twin itself is applied by parseFlags, which this test
			// does not run: the flag keeps its default.
			map[string]string{"log-level": "info"}},
		{"nothing set", map[string]string{}, nil,
			map[string]string{"redis-url": "", "config-dir": "/etc/envoy-rls/config", "http-addr": ":8080", "log-format": "json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flagValue, _, err := refEnvRun(t, tc.env, tc.args...)
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

// TestRefEnvNotes: every reference variable found gets a line saying what
// became of it; unsupported ones a warning with what to use instead.
func TestRefEnvNotes(t *testing.T) {
	_, notes, err := refEnvRun(t, map[string]string{
		"USE_STATSD": "true", "GRPC_SERVER_TLS_CA_CERT": "/ca", "MEMCACHE_HOST_PORT": "m:11211", "LOG_LEVEL": "info",
		"REDIS_TIMEOUT": "10s", "GRPC_MAX_CONNECTION_AGE": "1h", "ENVOY_RLS_SHADOW_MODE": "true", "SHADOW_MODE": "false",
	})
	if err != nil {
		t.Fatal(err)
	}
	find := func(v string) *dropin.Note {
		for i := range notes {
			if slices.Contains(notes[i].Vars, v) {
				return &notes[i]
			}
		}
		t.Fatalf("no note for %s in %+v", v, notes)
		return nil
	}
	for _, tc := range []struct {
		v, msg string
		warn   bool
		detail string
	}{
		{"USE_STATSD", "mapped", false, "statsd"},
		{"GRPC_SERVER_TLS_CA_CERT", "not supported", true, "GRPC_CLIENT_TLS_CACERT"},
		{"MEMCACHE_HOST_PORT", "not supported", true, "Redis"},
		{"LOG_LEVEL", "mapped", false, ""},
		{"REDIS_TIMEOUT", "mapped", false, "100ms"},
		{"SHADOW_MODE", "overridden", false, ""},
	} {
		n := find(tc.v)
		if n.Warn != tc.warn || !strings.Contains(n.Msg, tc.msg) || !strings.Contains(n.Detail, tc.detail) {
			t.Errorf("note for %s: %+v, want warn=%v, message with %q, detail with %q", tc.v, *n, tc.warn, tc.msg, tc.detail)
		}
	}
	if n := find("GRPC_MAX_CONNECTION_AGE"); !n.Warn && !strings.Contains(n.Msg, "mapped") {
		t.Errorf("GRPC_MAX_CONNECTION_AGE: %+v, want mapped, or a warning where this build lacks the flag", *n)
	}
}

func TestRefEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"PORT": "http"}, "PORT"},
		{map[string]string{"REDIS_TYPE": "ring", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "h:1"}, "REDIS_TYPE"},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp", "REDIS_URL": "h:1"}, "REDIS_SOCKET_TYPE"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "h:1"}, "master"},
		{map[string]string{"REDIS_PERSECOND": "yes please"}, "REDIS_PERSECOND"},
		{map[string]string{"SHADOW_MODE": "maybe"}, "SHADOW_MODE"},
		{map[string]string{"REDIS_POOL_SIZE": "ten"}, "REDIS_POOL_SIZE"},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, "LOCAL_CACHE_SIZE_IN_BYTES"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, "CONFIG_TYPE"},
		{map[string]string{"XDS_CLIENT_BACKOFF_JITTER": "often"}, "XDS_CLIENT_BACKOFF_JITTER"},
	} {
		if _, _, err := refEnvRun(t, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
}

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
