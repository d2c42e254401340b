package serveconfig

import (
	"fmt"
	"net"
	"strconv"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/pkg/refstats"
	"github.com/envoy-rls/envoy-rls/pkg/tracing"
)

// statsdFlags configure the reference's statsd stats (pkg/refstats).
type statsdFlags struct {
	addr     string
	protocol string
	tags     string
	flush    time.Duration
}

func (s *statsdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.addr, "statsd-addr", "", "send envoyproxy/ratelimit's statsd stats, under its names, to this statsd server host:port (its USE_STATSD, STATSD_HOST, STATSD_PORT), e.g. a statsd_exporter; empty: none")
	fs.StringVar(&s.protocol, "statsd-protocol", "tcp", "statsd transport: tcp (as envoyproxy/ratelimit's client) or udp")
	fs.StringVar(&s.tags, "statsd-tags", "", "tags added to every statsd stat, comma list of key:value (envoyproxy/ratelimit's EXTRA_TAGS), encoded into the name as .__key=value as it does")
	fs.DurationVar(&s.flush, "statsd-flush-interval", 5*time.Second, "how often statsd counters are sent (envoyproxy/ratelimit's GOSTATS_FLUSH_INTERVAL_SECONDS)")
}

// options parses the flags; ok is false when statsd is off.
func (s *statsdFlags) options() (o refstats.Options, ok bool, err error) {
	if s.addr == "" {
		return o, false, nil
	}
	host, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		return o, false, fmt.Errorf("--statsd-addr: %w", err)
	}
	o.Host, o.Protocol, o.FlushInterval = host, s.protocol, s.flush
	if o.Port, err = strconv.Atoi(port); err != nil {
		return o, false, fmt.Errorf("--statsd-addr: port %q is not a number", port)
	}
	if o.Tags, err = parsePairs(s.tags); err != nil {
		return o, false, fmt.Errorf("--statsd-tags: %w", err)
	}
	if s.flush <= 0 {
		return o, false, fmt.Errorf("--statsd-flush-interval: %v must be positive", s.flush)
	}
	if err := o.Validate(); err != nil {
		return o, false, fmt.Errorf("--statsd-addr: %w", err)
	}
	return o, true, nil
}

// tracingFlags configure OpenTelemetry tracing (pkg/tracing).
type tracingFlags struct {
	on  bool
	opt tracing.Options
}

func (t *tracingFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&t.on, "tracing", false, "trace every ShouldRateLimit and its backend call with OpenTelemetry, exported over OTLP to the endpoint of the standard OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) variable (envoyproxy/ratelimit's TRACING_ENABLED)")
	fs.StringVar(&t.opt.ServiceName, "tracing-service-name", "envoy-rls", "service.name of the spans (TRACING_SERVICE_NAME)")
	fs.StringVar(&t.opt.ServiceNamespace, "tracing-service-namespace", "", "service.namespace of the spans (TRACING_SERVICE_NAMESPACE)")
	fs.StringVar(&t.opt.ServiceInstanceID, "tracing-service-instance-id", "", "service.instance.id of the spans, such as the pod name (TRACING_SERVICE_INSTANCE_ID)")
	fs.Float64Var(&t.opt.SamplingRate, "tracing-sampling-rate", 1, "share of new traces sampled, in [0, 1]; a call carrying a sampled (or unsampled) trace context follows it (TRACING_SAMPLING_RATE)")
	fs.StringVar(&t.opt.Protocol, "tracing-protocol", tracing.ProtocolHTTP, "OTLP transport: http (protobuf, port 4318) or grpc (port 4317) (TRACING_EXPORTER_PROTOCOL)")
}

func (t *tracingFlags) validate() error {
	if !t.on {
		return nil
	}
	if err := t.opt.Validate(); err != nil {
		return fmt.Errorf("--tracing: %w", err)
	}
	return nil
}

// observeConfig is the statsd, tracing and reference-metrics part of the
// app's Config.
func (c *Settings) observeConfig() (app.ObserveConfig, error) {
	oc := app.ObserveConfig{ReferenceMetrics: c.referenceMetrics, NearLimitRatio: c.nearLimitRatio}
	so, on, err := c.statsd.options()
	if err != nil {
		return oc, err
	}
	if on {
		oc.Statsd = &so
	}
	if c.tracing.on {
		opt := c.tracing.opt
		oc.Tracing = &opt
	}
	return oc, nil
}
