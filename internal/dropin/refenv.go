package dropin

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	flag "github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// envoyproxy/ratelimit is configured by environment variables only, and
// its deployments (Istio's sample among them) start it with no arguments.
// So that such a deployment runs envoy-rls unchanged, serve reads those
// variables as a third source, below the command line and the ENVOY_RLS_*
// twins: refMappings say which flag each one sets and how its value
// converts, and refUnsupportedVars what to use instead of the ones envoy-rls has
// no equivalent for. Nothing is ignored silently: each variable found is
// logged once at start (see Note).

// lookupFunc reads one environment variable (os.LookupEnv in serve).
type lookupFunc = flagenv.Lookup

// refMapping maps the reference variables vars, read together, to one of
// our flags. conv computes the flag's value from them; ok false means the
// variables found do not set the flag (REDIS_TLS_CACERT without
// REDIS_TLS). A nil conv passes the single variable's value unchanged.
type refMapping struct {
	vars []string
	flag string
	conv func(get lookupFunc) (value string, ok bool, err error)
	// detail, when set, is logged with the mapping: a difference worth
	// knowing.
	detail string
}

// refUnsupported is a reference variable (or, ending in '_', every
// variable with that prefix) that envoy-rls does not read, and what to do
// instead.
type refUnsupported struct {
	name    string
	instead string
}

// Note is one start-up log line about the reference's variables; the
// logger exists only after the flags are parsed, so they are collected
// first and logged by LogNotes.
type Note struct {
	Warn   bool
	Msg    string
	Vars   []string
	Flag   string
	Detail string
}

// Reference defaults used when one variable of a group is set without the
// others; they are envoyproxy/ratelimit's own.
const (
	refRuntimeRoot   = "/srv/runtime_data/current"
	refRuntimeAppDir = "config"
	refHost          = "0.0.0.0"
	refHTTPPort      = "8080"
	refGRPCPort      = "8081"
	refDebugPort     = "6070"
	// refDenyEntryBytes converts LOCAL_CACHE_SIZE_IN_BYTES (a byte budget
	// for the reference's freecache of over-limit keys) into deny-cache
	// entries: about what one entry costs here, key included.
	refDenyEntryBytes = 256
)

// refRedisSocket is the reference's REDIS_URL and REDIS_PERSECOND_URL
// default, a twemproxy socket.
var refRedisSocket = map[string]string{
	"REDIS_":           "/var/run/nutcracker/ratelimit.sock",
	"REDIS_PERSECOND_": "/var/run/nutcracker/ratelimitpersecond.sock",
}

var refMappings = []refMapping{
	{vars: []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}, flag: "config-dir", conv: runtimeDir},
	{vars: []string{"HOST", "PORT"}, flag: "http-addr", conv: hostPort("HOST", "PORT", refHTTPPort)},
	{vars: []string{"GRPC_UDS", "GRPC_HOST", "GRPC_PORT"}, flag: "grpc-addr", conv: grpcAddr},
	{vars: []string{"DEBUG_HOST", "DEBUG_PORT"}, flag: "debug-addr", conv: hostPort("DEBUG_HOST", "DEBUG_PORT", refDebugPort),
		detail: "the debug port serves /debug/config, /rlconfig and /debug/pprof; envoy-rls listens on 127.0.0.1:6070 unless told otherwise"},
	{vars: []string{"GRPC_MAX_CONNECTION_AGE"}, flag: "grpc-max-connection-age"},
	{vars: []string{"GRPC_MAX_CONNECTION_AGE_GRACE"}, flag: "grpc-max-connection-age-grace"},
	{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT"}, flag: "grpc-tls-cert", conv: ifTrue("GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT")},
	{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_KEY"}, flag: "grpc-tls-key", conv: ifTrue("GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_KEY")},
	{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_CLIENT_TLS_CACERT"}, flag: "grpc-tls-client-ca", conv: ifTrue("GRPC_SERVER_USE_TLS", "GRPC_CLIENT_TLS_CACERT")},
	{vars: []string{"LOG_LEVEL"}, flag: "log-level", conv: logLevel},
	{vars: []string{"LOG_FORMAT"}, flag: "log-format", conv: logFormat},
	{vars: []string{"SHADOW_MODE"}, flag: "shadow-mode"},
	{vars: []string{"MERGE_DOMAIN_CONFIG"}, flag: "merge-domain-config"},
	{vars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, flag: "response-headers", conv: headersEnabled},
	{vars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}, flag: "legacy-header-names", conv: headerNames},
	{vars: []string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_SENTINEL_AUTH"}, flag: "redis-url", conv: redisURL("REDIS_", "")},
	{vars: []string{"REDIS_TLS", "REDIS_TLS_CACERT"}, flag: "redis-tls-ca", conv: ifTrue("REDIS_TLS", "REDIS_TLS_CACERT")},
	{vars: []string{"REDIS_TLS", "REDIS_TLS_CLIENT_CERT"}, flag: "redis-tls-cert", conv: ifTrue("REDIS_TLS", "REDIS_TLS_CLIENT_CERT")},
	{vars: []string{"REDIS_TLS", "REDIS_TLS_CLIENT_KEY"}, flag: "redis-tls-key", conv: ifTrue("REDIS_TLS", "REDIS_TLS_CLIENT_KEY")},
	{vars: []string{"REDIS_POOL_SIZE"}, flag: "redis-pool-size"},
	{vars: []string{"REDIS_TIMEOUT"}, flag: "redis-timeout",
		detail: "envoyproxy/ratelimit defaults to 10s, envoy-rls to 100ms (a rate-limit call sits on every request's path); the value set is used"},
	{vars: []string{"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH"},
		flag: "redis-persecond-url", conv: redisURL("REDIS_PERSECOND_", "REDIS_PERSECOND")},
	{vars: []string{"CACHE_KEY_PREFIX"}, flag: "redis-key-prefix"},
	{vars: []string{"USE_PROMETHEUS", "PROMETHEUS_ADDR"}, flag: "metrics-addr", conv: prometheusAddr,
		detail: "the metrics are also on /metrics of --http-addr (HOST:PORT)"},
	{vars: []string{"USE_PROMETHEUS", "PROMETHEUS_PATH"}, flag: "metrics-path", conv: prometheusPath},
	{vars: []string{"NEAR_LIMIT_RATIO"}, flag: "near-limit-ratio",
		detail: "used by the reference's counters, which --reference-metrics exports"},
	{vars: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, flag: "count-denied-hits", conv: countDenied,
		detail: "the reference counts denied hits unless this is true; envoy-rls counts them with --count-denied-hits (cost: charge by default), which drop-in mode turns on unless this is true"},
	{vars: []string{"CONFIG_TYPE"}, flag: "config-source", conv: configType},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_URL"}, flag: "xds-server"},
	{vars: []string{"CONFIG_GRPC_XDS_NODE_ID"}, flag: "xds-node-id"},
	{vars: []string{"CONFIG_GRPC_XDS_NODE_METADATA"}, flag: "xds-node-metadata"},
	{vars: []string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}, flag: "xds-headers"},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS"}, flag: "xds-tls"},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"}, flag: "xds-tls-ca", conv: ifTrue("CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"}, flag: "xds-tls-cert", conv: ifTrue("CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"}, flag: "xds-tls-key", conv: ifTrue("CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}, flag: "xds-tls-san", conv: ifTrue("CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_SAN")},
	{vars: []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"}, flag: "xds-backoff-initial"},
	{vars: []string{"XDS_CLIENT_BACKOFF_MAX_INTERVAL"}, flag: "xds-backoff-max"},
	{vars: []string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR"}, flag: "xds-backoff-random-factor"},
	{vars: []string{"XDS_CLIENT_BACKOFF_JITTER"}, flag: "xds-backoff-jitter"},
	{vars: []string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}, flag: "xds-max-msg-size"},
	{vars: []string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}, flag: "xds-force-start",
		detail: "only the xDS source (CONFIG_TYPE=GRPC_XDS_SOTW) starts without rules; a rule directory must load at start"},
	{vars: []string{"LOCAL_CACHE_SIZE_IN_BYTES"}, flag: "redis-deny-cache-entries", conv: denyCacheEntries,
		detail: "converted at about 256 bytes per entry; 0 turns the deny cache off, as it turns off the reference's local cache"},
	// Observability: statsd, the reference's Prometheus names, tracing
	// (internal/serveconfig/observability.go).
	{vars: []string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT"}, flag: "statsd-addr", conv: statsdAddr,
		detail: "the reference's stats under its statsd names; the response_time timer carries the fraction of a millisecond the reference truncates"},
	{vars: []string{"STATSD_PROTOCOL"}, flag: "statsd-protocol", conv: lowerVar("STATSD_PROTOCOL")},
	{vars: []string{"EXTRA_TAGS"}, flag: "statsd-tags"},
	{vars: []string{"GOSTATS_FLUSH_INTERVAL_SECONDS"}, flag: "statsd-flush-interval", conv: flushSeconds},
	{vars: []string{"USE_PROMETHEUS"}, flag: "reference-metrics", conv: whenTrue("USE_PROMETHEUS", "USE_PROMETHEUS", "true"),
		detail: "the reference's Prometheus names (ratelimit_service_*) are exported beside envoy-rls's own"},
	{vars: []string{"TRACING_ENABLED"}, flag: "tracing", conv: boolVar("TRACING_ENABLED")},
	{vars: []string{"TRACING_ENABLED", "TRACING_SERVICE_NAME"}, flag: "tracing-service-name", conv: whenTrue("TRACING_ENABLED", "TRACING_SERVICE_NAME", "RateLimit")},
	{vars: []string{"TRACING_SERVICE_NAMESPACE"}, flag: "tracing-service-namespace"},
	{vars: []string{"TRACING_SERVICE_INSTANCE_ID"}, flag: "tracing-service-instance-id"},
	{vars: []string{"TRACING_SAMPLING_RATE"}, flag: "tracing-sampling-rate"},
	{vars: []string{"TRACING_EXPORTER_PROTOCOL"}, flag: "tracing-protocol", conv: lowerVar("TRACING_EXPORTER_PROTOCOL")},
}

var refUnsupportedVars = []refUnsupported{
	{"USE_DOG_STATSD", "envoy-rls sends plain statsd (USE_STATSD, with EXTRA_TAGS in the names as the reference does); the Datadog agent also reads /metrics on --http-addr"},
	{"USE_DOG_STATSD_MOGRIFIERS", "envoy-rls sends plain statsd; the Datadog agent also reads /metrics on --http-addr"},
	{"STATS_FLUSH_INTERVAL", "statsd counters are flushed every GOSTATS_FLUSH_INTERVAL_SECONDS (--statsd-flush-interval); Prometheus metrics are pulled"},
	{"DISABLE_STATS", "metrics are always served on /metrics of --http-addr; do not scrape them if unwanted"},
	{"PROMETHEUS_MAPPER_YAML", "envoy-rls's metric names are fixed (docs/operations.md)"},
	{"BACKEND_TYPE", "envoy-rls's backends are Redis (--redis-url) or the in-process store (no --redis-url); memcached is not supported"},
	{"MEMCACHE_", "memcached is not supported; use Redis (--redis-url)"},
	{"REDIS_PIPELINE_WINDOW", "envoy-rls batches concurrent requests by itself (a pipeline leaves when the previous one returns); nothing to set"},
	{"REDIS_PIPELINE_LIMIT", "envoy-rls batches concurrent requests by itself; nothing to set"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "envoy-rls batches concurrent requests by itself; nothing to set"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "envoy-rls batches concurrent requests by itself; nothing to set"},
	{"REDIS_PERSECOND_POOL_SIZE", "the per-second Redis uses --redis-pool-size (REDIS_POOL_SIZE) too"},
	{"REDIS_PERSECOND_TIMEOUT", "the per-second Redis uses --redis-timeout (REDIS_TIMEOUT) too"},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "give Redis a certificate whose name matches the host in REDIS_URL"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "/readyz and /healthcheck already fail while Redis is unreachable under --redis-failure-mode=error"},
	{"REDIS_POOL_ON_EMPTY_", "envoy-rls's pool waits up to --redis-timeout for a connection"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_", "the per-second Redis's pool waits up to --redis-timeout for a connection"},
	{"QUOTA_MODE", "set quota_mode: true on the descriptors to put in quota mode; there is no global switch"},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "reconnections to the xDS server back off as --xds-backoff-initial and --xds-backoff-max say (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, XDS_CLIENT_BACKOFF_MAX_INTERVAL)"},
	{"DESCRIPTOR_KEY_CONFIG", "envoy-rls reads no descriptor key file; the rules of --config-dir are all it reads"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "every key's TTL is the time its state takes to equal no key; there is nothing to jitter"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "nothing to set: envoy-rls serves only once its rules have loaded"},
	{"RUNTIME_WATCH_ROOT", "--config-dir is always watched, including the Kubernetes ConfigMap ..data swap"},
	{"GRPC_CLIENT_TLS_SAN", "--grpc-tls-client-ca verifies the client certificate's chain, not its SAN"},
	// Envoy Gateway sets it; the reference reads GRPC_CLIENT_TLS_CACERT
	// only, so it asks no client certificate there either.
	{"GRPC_SERVER_TLS_CA_CERT", "envoyproxy/ratelimit does not read it either: as there, clients need no certificate; set GRPC_CLIENT_TLS_CACERT (--grpc-tls-client-ca) to require certificates signed by that CA (mTLS)"},
	{"RESPONSE_DYNAMIC_METADATA", "dynamic metadata in responses is not supported"},
	{"PROTO", "the listeners are TCP, or a unix socket with --grpc-addr unix:///path (GRPC_UDS)"},
}

// applyRefEnv sets every flag of fs that neither the command line nor its
// ENVOY_RLS_* twin set, from the reference variables that map to it, and
// returns the notes to log. given reports whether a flag was set by us
// (command line or twin); env lists the environment (os.Environ) for the
// prefix entries of refUnsupported.
func applyRefEnv(fs *flag.FlagSet, given func(name string) bool, get lookupFunc, env []string) ([]Note, error) {
	var notes []Note
	for _, m := range refMappings {
		found := setVars(get, m.vars)
		if len(found) == 0 {
			continue
		}
		f := fs.Lookup(m.flag)
		switch {
		case f == nil:
			notes = append(notes, Note{Warn: true, Msg: "envoyproxy/ratelimit setting not supported by this build; ignored", Vars: found, Flag: "--" + m.flag})
			continue
		case given(m.flag):
			notes = append(notes, Note{Msg: "envoyproxy/ratelimit setting overridden by our own flag or ENVOY_RLS_ variable", Vars: found, Flag: "--" + m.flag})
			continue
		}
		conv := m.conv
		if conv == nil {
			conv = func(get lookupFunc) (string, bool, error) { v, _ := get(m.vars[0]); return v, true, nil }
		}
		v, ok, err := conv(get)
		if err != nil {
			return notes, fmt.Errorf("%s (for --%s): %w", strings.Join(found, ", "), m.flag, err)
		}
		if !ok {
			notes = append(notes, Note{Msg: "envoyproxy/ratelimit setting has no effect as set (its switch is off)", Vars: found, Flag: "--" + m.flag})
			continue
		}
		if err := f.Value.Set(v); err != nil {
			return notes, fmt.Errorf("%s (for --%s): invalid value: %w", strings.Join(found, ", "), m.flag, err)
		}
		notes = append(notes, Note{Msg: "envoyproxy/ratelimit setting mapped", Vars: found, Flag: "--" + m.flag, Detail: m.detail})
	}
	for _, u := range refUnsupportedVars {
		for _, name := range unsupportedSet(u.name, get, env) {
			notes = append(notes, Note{Warn: true, Msg: "envoyproxy/ratelimit setting not supported; ignored", Vars: []string{name}, Detail: u.instead})
		}
	}
	return notes, nil
}

// setVars returns the variables of vars that are set.
func setVars(get lookupFunc, vars []string) []string {
	var found []string
	for _, v := range vars {
		if _, ok := get(v); ok {
			found = append(found, v)
		}
	}
	return found
}

// unsupportedSet returns the set variables that name (a name, or a prefix
// ending in '_') stands for.
func unsupportedSet(name string, get lookupFunc, env []string) []string {
	if !strings.HasSuffix(name, "_") {
		if _, ok := get(name); ok {
			return []string{name}
		}
		return nil
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, name) {
			out = append(out, k)
		}
	}
	return out
}

// LogNotes logs the notes Apply collected.
func LogNotes(log *zap.Logger, notes []Note) {
	for _, n := range notes {
		fields := []zap.Field{zap.Strings("variables", n.Vars)}
		if n.Flag != "" {
			fields = append(fields, zap.String("flag", n.Flag))
		}
		if n.Detail != "" {
			fields = append(fields, zap.String("detail", n.Detail))
		}
		if n.Warn {
			log.Warn(n.Msg, fields...)
		} else {
			log.Info(n.Msg, fields...)
		}
	}
}

// value returns a set variable's value, or def.
func value(get lookupFunc, name, def string) string {
	if v, ok := get(name); ok {
		return v
	}
	return def
}

// isTrue reads a reference boolean as envconfig does (strconv.ParseBool);
// unset is false.
func isTrue(get lookupFunc, name string) (bool, error) {
	v, ok := get(name)
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// runtimeDir is where the reference loads rules from: the files of
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func runtimeDir(get lookupFunc) (string, bool, error) {
	return filepath.Join(value(get, "RUNTIME_ROOT", refRuntimeRoot), value(get, "RUNTIME_SUBDIRECTORY", ""), value(get, "RUNTIME_APPDIRECTORY", refRuntimeAppDir)), true, nil
}

// hostPort joins a host and a port variable, each with the reference's
// default.
func hostPort(hostVar, portVar, defPort string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		port := value(get, portVar, defPort)
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", false, fmt.Errorf("%s=%q: want a port number", portVar, port)
		}
		return net.JoinHostPort(value(get, hostVar, refHost), port), true, nil
	}
}

// grpcAddr is GRPC_UDS as a unix:// address when set (it wins over
// GRPC_HOST and GRPC_PORT there too), else GRPC_HOST:GRPC_PORT.
func grpcAddr(get lookupFunc) (string, bool, error) {
	if uds, ok := get("GRPC_UDS"); ok && uds != "" {
		return "unix://" + uds, true, nil
	}
	if len(setVars(get, []string{"GRPC_HOST", "GRPC_PORT"})) == 0 {
		return "", false, nil
	}
	return hostPort("GRPC_HOST", "GRPC_PORT", refGRPCPort)(get)
}

// ifTrue passes the variable file on only when the boolean on is true: the
// reference reads its TLS files only then.
func ifTrue(on, file string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		enabled, err := isTrue(get, on)
		if err != nil || !enabled {
			return "", false, err
		}
		v, ok := get(file)
		return v, ok && v != "", nil
	}
}

// logLevel maps the reference's logrus levels onto zap's.
func logLevel(get lookupFunc) (string, bool, error) {
	v, _ := get("LOG_LEVEL")
	switch l := strings.ToLower(v); l {
	case "trace", "debug":
		return "debug", true, nil
	case "info":
		return "info", true, nil
	case "warn", "warning":
		return "warn", true, nil
	case "error", "fatal", "panic":
		return "error", true, nil
	}
	return "", false, fmt.Errorf("LOG_LEVEL=%q: want trace|debug|info|warn|warning|error|fatal|panic", v)
}

// logFormat maps the reference's text|json onto console|json.
func logFormat(get lookupFunc) (string, bool, error) {
	v, _ := get("LOG_FORMAT")
	switch strings.ToLower(v) {
	case "json":
		return "json", true, nil
	case "text":
		return "console", true, nil
	}
	return "", false, fmt.Errorf("LOG_FORMAT=%q: want text or json", v)
}

// headersEnabled: the reference's three headers are our legacy set, renamed
// (headerNames).
func headersEnabled(get lookupFunc) (string, bool, error) {
	on, err := isTrue(get, "LIMIT_RESPONSE_HEADERS_ENABLED")
	if err != nil {
		return "", false, err
	}
	if on {
		return "legacy", true, nil
	}
	return "none", true, nil
}

// headerNames gives the legacy headers the reference's names, its
// defaults where a name is not set.
func headerNames(get lookupFunc) (string, bool, error) {
	return strings.Join([]string{
		value(get, "LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
		value(get, "LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
		value(get, "LIMIT_RESET_HEADER", "RateLimit-Reset"),
	}, ","), true, nil
}

// denyCacheEntries converts LOCAL_CACHE_SIZE_IN_BYTES into entries.
func denyCacheEntries(get lookupFunc) (string, bool, error) {
	v, _ := get("LOCAL_CACHE_SIZE_IN_BYTES")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return "", false, fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%q: want a number of bytes", v)
	}
	if n == 0 {
		return "0", true, nil
	}
	return strconv.Itoa(max(n/refDenyEntryBytes, 1)), true, nil
}

// redisURL builds our Redis URL from the reference's Redis variables with
// prefix p (REDIS_ or REDIS_PERSECOND_). enable, when set, names the
// boolean that must be true (REDIS_PERSECOND).
//
// REDIS_URL is host:port for a single node, "master,host:port,..." for
// Sentinel and "host:port,..." for a cluster, or a socket path when
// REDIS_SOCKET_TYPE is unix (the reference's default); REDIS_AUTH is
// "password" or "user:password".
func redisURL(p, enable string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		if enable != "" {
			on, err := isTrue(get, enable)
			if err != nil || !on {
				return "", false, err
			}
		}
		addr, ok := get(p + "URL")
		if !ok || addr == "" {
			addr = refRedisSocket[p]
		}
		if strings.Contains(addr, "://") {
			return addr, true, nil // already one of our URLs
		}
		tls, err := isTrue(get, p+"TLS")
		if err != nil {
			return "", false, err
		}
		user := ""
		if auth, ok := get(p + "AUTH"); ok && auth != "" {
			if u, pw, found := strings.Cut(auth, ":"); found {
				user = url.UserPassword(u, pw).String() + "@"
			} else {
				user = url.UserPassword("", auth).String() + "@"
			}
		}
		socket := strings.ToLower(value(get, p+"SOCKET_TYPE", "unix"))
		typ := strings.ToLower(value(get, p+"TYPE", "single"))
		switch {
		case socket == "unix" && typ == "single":
			return "unix://" + user + addr, true, nil
		case socket == "unix":
			return "", false, fmt.Errorf("%sSOCKET_TYPE=unix with %sTYPE=%s: a unix socket reaches a single Redis only", p, p, typ)
		case socket != "tcp":
			return "", false, fmt.Errorf("%sSOCKET_TYPE=%q: want tcp or unix", p, socket)
		}
		scheme := "redis"
		if tls {
			scheme = "rediss"
		}
		switch typ {
		case "single":
			return scheme + "://" + user + addr, true, nil
		case "cluster":
			return scheme + "+cluster://" + user + addr, true, nil
		case "sentinel":
			master, hosts, found := strings.Cut(addr, ",")
			if !found || master == "" {
				return "", false, fmt.Errorf("%sURL=%q: a Sentinel URL is master,host:port[,host:port...]", p, addr)
			}
			u := scheme + "+sentinel://" + user + hosts + "/" + url.PathEscape(master)
			if sa, ok := get(p + "SENTINEL_AUTH"); ok && sa != "" {
				u += "?sentinel_password=" + url.QueryEscape(sa)
			}
			return u, true, nil
		}
		return "", false, fmt.Errorf("%sTYPE=%q: want single, sentinel or cluster", p, typ)
	}
}

// ourFlagGiven returns whether a flag of fs was set by us: on the command
// line (visited by Parse) or by its ENVOY_RLS_* twin.
func ourFlagGiven(fs *flag.FlagSet, get lookupFunc) func(string) bool {
	return func(name string) bool { return flagenv.Given(fs, get, name) }
}

// countDenied is --count-denied-hits, the negation of the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func countDenied(get lookupFunc) (string, bool, error) {
	stop, err := isTrue(get, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	if err != nil {
		return "", false, err
	}
	return strconv.FormatBool(!stop), true, nil
}

// configType maps the reference's CONFIG_TYPE onto --config-source.
func configType(get lookupFunc) (string, bool, error) {
	v, _ := get("CONFIG_TYPE")
	switch strings.ToUpper(v) {
	case "", "FILE":
		return "file", true, nil
	case "GRPC_XDS_SOTW":
		return "xds", true, nil
	}
	return "", false, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", v)
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

// statsdAddr maps USE_STATSD, STATSD_HOST and STATSD_PORT: the reference
// sends stats only when USE_STATSD is true, to localhost:8125 unless told
// otherwise.
func statsdAddr(get lookupFunc) (string, bool, error) {
	on, err := isTrue(get, "USE_STATSD")
	if err != nil || !on {
		return "", false, err
	}
	port := value(get, "STATSD_PORT", "8125")
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", false, fmt.Errorf("STATSD_PORT=%q: want a port number", port)
	}
	return net.JoinHostPort(value(get, "STATSD_HOST", "localhost"), port), true, nil
}

// flushSeconds maps GOSTATS_FLUSH_INTERVAL_SECONDS (whole seconds).
func flushSeconds(get lookupFunc) (string, bool, error) {
	v, _ := get("GOSTATS_FLUSH_INTERVAL_SECONDS")
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return "", false, fmt.Errorf("GOSTATS_FLUSH_INTERVAL_SECONDS=%q: want a positive number of seconds", v)
	}
	return strconv.Itoa(n) + "s", true, nil
}

// whenTrue maps a variable read only when the boolean on is true, with
// the reference's default def when it is not set.
func whenTrue(on, name, def string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		enabled, err := isTrue(get, on)
		if err != nil || !enabled {
			return "", false, err
		}
		return value(get, name, def), true, nil
	}
}

// boolVar passes a reference boolean on as true or false.
func boolVar(name string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		on, err := isTrue(get, name)
		return strconv.FormatBool(on), err == nil, err
	}
}

// lowerVar passes a variable on in lower case (TRACING_EXPORTER_PROTOCOL
// is case-insensitive there).
func lowerVar(name string) func(lookupFunc) (string, bool, error) {
	return func(get lookupFunc) (string, bool, error) {
		v, _ := get(name)
		return strings.ToLower(v), true, nil
	}
}

// FlagVars lists, per flag name, the reference's variables that set it,
// for the help of the commands that read them.
func FlagVars() map[string][]string {
	vars := map[string][]string{}
	for _, m := range refMappings {
		for _, v := range m.vars {
			if !slices.Contains(vars[m.flag], v) {
				vars[m.flag] = append(vars[m.flag], v)
			}
		}
	}
	return vars
}
