package dropin_test

import (
	"slices"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

// settingStatus is what serve does with one of envoyproxy/ratelimit's
// settings.
type settingStatus int

const (
	// supported: mapped onto a flag (or drop-in mode) and logged at info,
	// as mapped, overridden or of no effect as set.
	supported settingStatus = iota
	// warned: not read, and named in a start-up warning saying what to do
	// instead.
	warned
)

// referenceSettings is every setting of envoyproxy/ratelimit's
// src/settings/settings.go (its envconfig names, in file order) at
// v1.4.1-0.20260122083618-3fb702589d36, the version `make bench` installs,
// each with a value the reference accepts (its default where it has one)
// and what envoy-rls does with it. A setting added to envoy-rls moves from
// warned to supported here.
var referenceSettings = []struct {
	name   string
	value  string
	status settingStatus
}{
	{"HOST", "0.0.0.0", supported},
	{"PORT", "8080", supported},
	{"DEBUG_HOST", "0.0.0.0", supported},
	{"DEBUG_PORT", "6070", supported},
	{"GRPC_UDS", "", supported},
	{"GRPC_HOST", "0.0.0.0", supported},
	{"GRPC_PORT", "8081", supported},
	{"GRPC_MAX_CONNECTION_AGE", "24h", supported},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", supported},
	{"GRPC_SERVER_USE_TLS", "false", supported},
	{"GRPC_SERVER_TLS_CERT", "", supported},
	{"GRPC_SERVER_TLS_KEY", "", supported},
	{"GRPC_CLIENT_TLS_CACERT", "", supported},
	{"GRPC_CLIENT_TLS_SAN", "", warned},
	{"LOG_LEVEL", "WARN", supported},
	{"LOG_FORMAT", "text", supported},
	{"CONFIG_TYPE", "FILE", supported},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", supported},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", supported},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", supported},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", supported},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", warned},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", supported},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", supported},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", supported},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", supported},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", supported},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", supported},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", supported},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", supported},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", supported},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", supported},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4194304", supported},
	{"USE_DOG_STATSD", "false", warned},
	{"USE_DOG_STATSD_MOGRIFIERS", "", warned},
	{"USE_STATSD", "true", supported},
	{"STATSD_HOST", "localhost", supported},
	{"STATSD_PORT", "8125", supported},
	{"EXTRA_TAGS", "", supported},
	{"STATS_FLUSH_INTERVAL", "10s", warned},
	{"DISABLE_STATS", "false", warned},
	{"USE_PROMETHEUS", "false", supported},
	{"PROMETHEUS_ADDR", ":9090", supported},
	{"PROMETHEUS_PATH", "/metrics", supported},
	{"PROMETHEUS_MAPPER_YAML", "", warned},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", supported},
	{"RUNTIME_SUBDIRECTORY", "ratelimit", supported},
	{"RUNTIME_APPDIRECTORY", "config", supported},
	{"RUNTIME_IGNOREDOTFILES", "false", supported},
	{"RUNTIME_WATCH_ROOT", "true", warned},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", warned},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", supported},
	{"NEAR_LIMIT_RATIO", "0.8", supported},
	{"CACHE_KEY_PREFIX", "", supported},
	{"BACKEND_TYPE", "redis", warned},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", supported},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", supported},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", supported},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", supported},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", supported},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", warned},
	{"REDIS_SOCKET_TYPE", "unix", supported},
	{"REDIS_TYPE", "SINGLE", supported},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", supported},
	{"REDIS_POOL_SIZE", "10", supported},
	{"REDIS_AUTH", "", supported},
	{"REDIS_TLS", "false", supported},
	{"REDIS_TLS_CLIENT_CERT", "", supported},
	{"REDIS_TLS_CLIENT_KEY", "", supported},
	{"REDIS_TLS_CACERT", "", supported},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", warned},
	{"REDIS_PIPELINE_WINDOW", "0", warned},
	{"REDIS_PIPELINE_LIMIT", "0", warned},
	{"REDIS_PERSECOND", "false", supported},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", supported},
	{"REDIS_PERSECOND_TYPE", "SINGLE", supported},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", supported},
	{"REDIS_PERSECOND_POOL_SIZE", "10", warned},
	{"REDIS_PERSECOND_AUTH", "", supported},
	{"REDIS_PERSECOND_TLS", "false", supported},
	{"REDIS_SENTINEL_AUTH", "", supported},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", supported},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", warned},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", warned},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", warned},
	{"REDIS_TIMEOUT", "10s", supported},
	{"REDIS_PERSECOND_TIMEOUT", "10s", warned},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", warned},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", warned},
	{"MEMCACHE_HOST_PORT", "", warned},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", warned},
	{"MEMCACHE_SRV", "", warned},
	{"MEMCACHE_SRV_REFRESH", "0", warned},
	{"MEMCACHE_TLS", "false", warned},
	{"MEMCACHE_TLS_CLIENT_CERT", "", warned},
	{"MEMCACHE_TLS_CLIENT_KEY", "", warned},
	{"MEMCACHE_TLS_CACERT", "", warned},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", warned},
	{"SHADOW_MODE", "false", supported},
	{"QUOTA_MODE", "false", warned},
	{"RESPONSE_DYNAMIC_METADATA", "false", warned},
	{"MERGE_DOMAIN_CONFIG", "false", supported},
	{"TRACING_ENABLED", "false", supported},
	{"TRACING_SERVICE_NAME", "RateLimit", supported},
	{"TRACING_SERVICE_NAMESPACE", "", supported},
	{"TRACING_SERVICE_INSTANCE_ID", "", supported},
	{"TRACING_EXPORTER_PROTOCOL", "http", supported},
	{"TRACING_SAMPLING_RATE", "1", supported},
}

// TestEverySettingAccountedFor: each of the reference's settings, set
// alone, gets a start-up line naming it, a warning exactly when it is not
// supported; none is silently ignored.
func TestEverySettingAccountedFor(t *testing.T) {
	for _, s := range referenceSettings {
		t.Run(s.name, func(t *testing.T) {
			_, fs := serveconfig.New("serve")
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			env := flagenv.MapEnv(map[string]string{s.name: s.value}, "envoy-rls")
			_, notes, err := dropin.Apply(fs, env)
			if err != nil {
				t.Fatalf("%s=%q: %v", s.name, s.value, err)
			}
			var lines []dropin.Note
			for _, n := range notes {
				// The warning of a debug listener beyond loopback is about
				// where it listens, not the setting's support
				// (TestDebugAddrBeyondLoopback).
				if slices.Contains(n.Vars, s.name) && n.Msg != dropin.DebugExposedMsg {
					lines = append(lines, n)
				}
			}
			if len(lines) == 0 {
				t.Fatalf("%s=%q: no start-up line names it (silently ignored)", s.name, s.value)
			}
			for _, n := range lines {
				if n.Warn != (s.status == warned) {
					t.Errorf("%s=%q: line %q (warning: %v), want a warning: %v", s.name, s.value, n.Msg, n.Warn, s.status == warned)
				}
				if n.Warn && n.Detail == "" {
					t.Errorf("%s: the warning says nothing about what to do instead", s.name)
				}
			}
		})
	}
}

// TestIssueNamedSettingsWarned: the settings found ignored in a trial,
// one of them (DESCRIPTOR_KEY_CONFIG) not in the reference's settings
// file, are warned about.
func TestIssueNamedSettingsWarned(t *testing.T) {
	for _, name := range []string{"DESCRIPTOR_KEY_CONFIG", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"} {
		_, fs := serveconfig.New("serve")
		_, notes, err := dropin.Apply(fs, flagenv.MapEnv(map[string]string{name: "x"}, "envoy-rls"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if i := slices.IndexFunc(notes, func(n dropin.Note) bool { return n.Warn && slices.Contains(n.Vars, name) }); i < 0 {
			t.Errorf("%s: no warning; notes %+v", name, notes)
		}
	}
}
