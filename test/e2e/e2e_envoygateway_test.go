package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/otlptest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/statsdtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
)

// egEnvironment is the container environment of Envoy Gateway's
// rate-limit Deployment, in its order, as its testdata default.yaml and
// enable-tracing.yaml (the same plus the TRACING_* and OTEL_* lines) set
// it. Values in braces are the cluster's addresses and files, which a
// test replaces with its own (egEnv).
var egEnvironment = []string{
	"RUNTIME_ROOT=/data",
	"RUNTIME_SUBDIRECTORY=ratelimit",
	"RUNTIME_IGNOREDOTFILES=true",
	"RUNTIME_WATCH_ROOT=false",
	"LOG_LEVEL=info",
	"USE_STATSD=true",
	"STATSD_PORT={statsd_port}", // 9125, the statsd_exporter sidecar's
	"CONFIG_TYPE=GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL={xds}", // envoy-gateway:18001
	"CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
	"GRPC_SERVER_USE_TLS=true",
	"GRPC_SERVER_TLS_CERT={certs}/tls.crt",
	"GRPC_SERVER_TLS_KEY={certs}/tls.key",
	"GRPC_SERVER_TLS_CA_CERT={certs}/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT={certs}/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY={certs}/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT={certs}/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
	"REDIS_SOCKET_TYPE=tcp",
	"REDIS_URL={redis}", // redis.redis.svc:6379
	// enable-tracing.yaml only:
	"TRACING_ENABLED=true",
	"TRACING_SERVICE_NAME=envoy-ratelimit",
	"TRACING_SERVICE_NAMESPACE=envoy-gateway-system",
	"TRACING_SERVICE_INSTANCE_ID=envoy-ratelimit-7d9f8c6b5-x2x4q", // the pod's metadata.name
	"TRACING_SAMPLING_RATE=1.0",
	"OTEL_EXPORTER_OTLP_ENDPOINT={otlp}", // http://trace-collector.envoy-gateway-system.svc.cluster.local:4318
}

// egLoopback are the only variables added to Envoy Gateway's: its pod
// listens on 0.0.0.0:8080 and :8081 (and the debug port), a test on free
// loopback ports.
var egLoopback = []string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}

// egTracing are the variables enable-tracing.yaml adds to default.yaml.
var egTracing = []string{"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_SAMPLING_RATE", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// egEnv is egEnvironment with the placeholders replaced, without the
// variables named in drop.
func egEnv(subst map[string]string, drop ...string) []string {
	var env []string
	for _, kv := range egEnvironment {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(drop, name) {
			continue
		}
		for k, v := range subst {
			kv = strings.ReplaceAll(kv, "{"+k+"}", v)
		}
		env = append(env, kv)
	}
	return append(env, egLoopback...)
}

// egRateLimitConfig is a RateLimitConfig as Envoy Gateway's translator
// emits it for a listener with one HTTPRoute and two rules: domain and
// name are the listener's, the route's descriptor (key = value = its
// name) holds one descriptor per rule match (key = value), the limit on
// the innermost; the second rule is in shadow mode.
func egRateLimitConfig(rpu uint32) *rlsconf.RateLimitConfig {
	match := func(name string, rpu uint32, shadow bool) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: name, Value: name, ShadowMode: shadow,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}}
	}
	return &rlsconf.RateLimitConfig{Name: "first-listener", Domain: "first-listener", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "first-route", Value: "first-route",
		Descriptors: []*rlsconf.RateLimitDescriptor{match("rule-0-match-0", rpu, false), match("rule-1-match-0", 0, true)},
	}}}
}

// egRequest is what Envoy sends for rule r of that route.
func egRequest(rule string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "first-listener", Descriptors: []*rlv3.RateLimitDescriptor{desc("first-route", "first-route", rule, rule)}}
}

// egSetup is the cluster around the rate-limit pod: its certificates, an
// mTLS xDS server, Redis, the statsd_exporter sidecar and a trace
// collector.
type egSetup struct {
	ca       *testcert.CA
	client   tls.Certificate // Envoy's client certificate
	cp       *xdstest.Server
	statsd   *statsdtest.Exporter
	otlp     *otlptest.Receiver
	subst    map[string]string
	xdsNode  string
	certsDir string
}

func newEGSetup(t *testing.T) *egSetup {
	t.Helper()
	e := &egSetup{ca: newCA(t, "envoy-gateway-ca"), xdsNode: "envoy-ratelimit", certsDir: filepath.Join(t.TempDir(), "certs")}
	if err := os.MkdirAll(e.certsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// One certificate for the gRPC server and the xDS client, as Envoy
	// Gateway's secret envoy-rate-limit holds.
	cert, key, err := e.ca.IssueDual("envoy-ratelimit", 2)
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, filepath.Join(e.certsDir, "tls.crt"), cert)
	writeBytes(t, filepath.Join(e.certsDir, "tls.key"), key)
	writeBytes(t, filepath.Join(e.certsDir, "ca.crt"), e.ca.PEM)
	if e.client, err = e.ca.IssueTLS("envoy", 3, false); err != nil {
		t.Fatal(err)
	}
	cpCert, err := e.ca.IssueTLS("envoy-gateway", 4, true)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Cert)
	e.cp = xdstest.Start(t, &tls.Config{Certificates: []tls.Certificate{cpCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	e.statsd = statsdtest.Start(t, statsdtest.EnvoyGatewayMapping())
	e.otlp = otlptest.StartHTTP(t)
	e.subst = map[string]string{
		"statsd_port": strconv.Itoa(e.statsd.StatsdPort), "xds": e.cp.Addr, "certs": e.certsDir,
		"redis": redistest.Standalone(t).Addr, "otlp": e.otlp.Endpoint,
	}
	return e
}

// start runs the binary as /bin/ratelimit with Envoy Gateway's
// environment less drop; ready waits for /readyz.
func (e *egSetup) start(t *testing.T, ready bool, drop ...string) *server {
	t.Helper()
	return e.startWith(t, e.subst, ready, drop...)
}

func (e *egSetup) startWith(t *testing.T, subst map[string]string, ready bool, drop ...string) *server {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binPath, bin); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	return startProcess(t, bin, nil, egEnv(subst, drop...), ready)
}

// mtls is a RateLimitService client over mTLS, as Envoy is configured by
// Envoy Gateway.
func (e *egSetup) mtls(t *testing.T, s *server) pb.RateLimitServiceClient {
	t.Helper()
	return tlsClient(t, s.GRPCAddr, e.ca, &e.client)
}

// awaitHealthcheck polls /healthcheck until it answers code.
func awaitHealthcheck(t *testing.T, s *server, why string, code int) {
	t.Helper()
	eventually.True(t, why, func() (bool, string) {
		got, body := s.get("/healthcheck")
		return got == code, fmt.Sprintf("status %d: %s", got, body)
	})
}

func askEG(t *testing.T, c pb.RateLimitServiceClient, rule string) pb.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, egRequest(rule))
	if err != nil {
		t.Fatalf("ShouldRateLimit over mTLS: %v", err)
	}
	return resp.GetOverallCode()
}

// TestEnvoyGatewayDeployment runs the binary exactly as Envoy Gateway's
// rate-limit Deployment does (/bin/ratelimit, no arguments, its
// environment with tracing on), among an mTLS xDS server pushing its
// translator's RateLimitConfig, Redis, the statsd_exporter sidecar with
// its mapping and an OTLP/HTTP collector.
func TestEnvoyGatewayDeployment(t *testing.T) {
	t.Parallel()
	e := newEGSetup(t)

	// FORCE_START_WITHOUT_INITIAL_CONFIG: ready at once, no limits yet.
	s := e.start(t, true)
	awaitHealthcheck(t, s, "force start: /healthcheck before any push", http.StatusOK)
	c := e.mtls(t, s)
	if got := askEG(t, c, "rule-0-match-0"); got != pb.RateLimitResponse_OK {
		t.Fatalf("before any push: %v, want OK", got)
	}
	// Without force start, ready only after the first push.
	waiting := e.start(t, false, "FORCE_START_WITHOUT_INITIAL_CONFIG")
	awaitHealthcheck(t, waiting, "no force start: /healthcheck before the first push", http.StatusServiceUnavailable)

	e.cp.Set(e.xdsNode, "v1", egRateLimitConfig(2))
	awaitHealthcheck(t, waiting, "no force start: /healthcheck after the first push", http.StatusOK)
	eventually.True(t, "v1 applied", func() (bool, string) {
		_, body := s.getDebug("/debug/config")
		return strings.Contains(body, "rule-0-match-0"), body
	})

	// Decisions follow the pushed config: 2 a minute, then over limit;
	// the shadow-mode rule (limit 0) answers OK.
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := askEG(t, c, "rule-0-match-0"); got != want {
			t.Errorf("request %d: %v, want %v", i+1, got, want)
		}
	}
	if got := askEG(t, c, "rule-1-match-0"); got != pb.RateLimitResponse_OK {
		t.Errorf("shadow-mode rule: %v, want OK", got)
	}

	checkEGTransport(t, e, s)
	checkEGStatsd(t, e)
	checkEGTraces(t, e)
	checkEGDefault(t, e)
	if !hasLog(t, s.logs.String(), "warn", "not supported", "GRPC_SERVER_TLS_CA_CERT") {
		t.Error("no start-up warning that GRPC_SERVER_TLS_CA_CERT requires no client certificate")
	}
}

// checkEGTransport: plaintext is refused; TLS without a client
// certificate is served, as by the reference, which reads no
// GRPC_SERVER_TLS_CA_CERT; mTLS works.
func checkEGTransport(t *testing.T, e *egSetup, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := s.rls().ShouldRateLimit(ctx, egRequest("rule-0-match-0")); err == nil {
		t.Error("plaintext gRPC was served, want refused")
	}
	if got := askEG(t, tlsClient(t, s.GRPCAddr, e.ca, nil), "rule-1-match-0"); got != pb.RateLimitResponse_OK {
		t.Errorf("TLS without a client certificate: %v, want OK", got)
	}
}

// checkEGStatsd: the sidecar exposes the per-descriptor counters and the
// service's under Envoy Gateway's mapping.
func checkEGStatsd(t *testing.T, e *egSetup) {
	t.Helper()
	rule0 := map[string]string{"domain": "first-listener", "key1": "first-route_first-route", "key2": "rule-0-match-0_rule-0-match-0"}
	rule1 := map[string]string{"domain": "first-listener", "key1": "first-route_first-route", "key2": "rule-1-match-0_rule-1-match-0"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ratelimit_service_rate_limit_total_hits", rule0, 3},
		{"ratelimit_service_rate_limit_within_limit", rule0, 2},
		{"ratelimit_service_rate_limit_near_limit", rule0, 1},
		{"ratelimit_service_rate_limit_over_limit", rule0, 1},
		{"ratelimit_service_rate_limit_shadow_mode", rule1, 2},
	} {
		eventually.True(t, fmt.Sprintf("statsd_exporter %s%v = %v", c.name, c.labels, c.want), func() (bool, string) {
			got, ok := e.statsd.Value(t, c.name, c.labels)
			return ok && got == c.want, fmt.Sprintf("%v (present %v); families: %s", got, ok, e.statsd.Names(t))
		})
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"}},
		{"ratelimit_service_response_time_seconds", map[string]string{"grpc_method": "ShouldRateLimit"}},
		{"ratelimit_service_config_load_success", map[string]string{}},
	} {
		eventually.True(t, "statsd_exporter "+c.name, func() (bool, string) {
			got, ok := e.statsd.Value(t, c.name, c.labels)
			return ok && got > 0, fmt.Sprintf("%v (present %v)", got, ok)
		})
	}
}

// checkEGTraces: the collector receives a ShouldRateLimit span per call
// with the TRACING_* resource, and the Redis call as its child.
func checkEGTraces(t *testing.T, e *egSetup) {
	t.Helper()
	eventually.True(t, "spans at the collector", func() (bool, string) {
		var n int
		for _, s := range e.otlp.Named("ShouldRateLimit") {
			if s.Attr("ratelimit.domain") == "first-listener" && s.Attr("ratelimit.code") == "OVER_LIMIT" {
				n++
			}
		}
		return n > 0 && len(e.otlp.Named("redis")) > 0, fmt.Sprintf("%d spans", len(e.otlp.Spans()))
	})
	span := e.otlp.Named("ShouldRateLimit")[0]
	for k, v := range map[string]string{"service.name": "envoy-ratelimit", "service.namespace": "envoy-gateway-system",
		"service.instance.id": "envoy-ratelimit-7d9f8c6b5-x2x4q"} {
		if span.Resource[k] != v {
			t.Errorf("resource %s = %q, want %q", k, span.Resource[k], v)
		}
	}
	parents := map[string]bool{}
	for _, s := range e.otlp.Named("ShouldRateLimit") {
		parents[string(s.GetSpanId())] = true
	}
	for _, r := range e.otlp.Named("redis") {
		if !parents[string(r.GetParentSpanId())] {
			t.Errorf("redis span %x has no ShouldRateLimit parent", r.GetSpanId())
		}
	}
}

// checkEGDefault runs a replica with default.yaml's environment exactly
// (no tracing) and its own statsd_exporter sidecar: ready at once, it
// decides from the same push and sends its stats; every span the
// collector has comes from the replica with tracing on.
func checkEGDefault(t *testing.T, e *egSetup) {
	t.Helper()
	sidecar := statsdtest.Start(t, statsdtest.EnvoyGatewayMapping())
	subst := maps.Clone(e.subst)
	subst["statsd_port"] = strconv.Itoa(sidecar.StatsdPort)
	plain := e.startWith(t, subst, true, egTracing...)
	awaitHealthcheck(t, plain, "default.yaml: /healthcheck", http.StatusOK)
	eventually.True(t, "default.yaml: v1 applied", func() (bool, string) {
		_, body := plain.getDebug("/debug/config")
		return strings.Contains(body, "rule-1-match-0"), body
	})
	if got := askEG(t, e.mtls(t, plain), "rule-1-match-0"); got != pb.RateLimitResponse_OK {
		t.Errorf("default.yaml, shadow-mode rule: %v, want OK", got)
	}
	rule1 := map[string]string{"domain": "first-listener", "key1": "first-route_first-route", "key2": "rule-1-match-0_rule-1-match-0"}
	eventually.True(t, "default.yaml: its sidecar's shadow_mode", func() (bool, string) {
		got, ok := sidecar.Value(t, "ratelimit_service_rate_limit_shadow_mode", rule1)
		return ok && got == 1, fmt.Sprintf("%v (present %v)", got, ok)
	})
	for _, sp := range e.otlp.Spans() {
		if id := sp.Resource["service.instance.id"]; id != "envoy-ratelimit-7d9f8c6b5-x2x4q" {
			t.Errorf("span %s from instance %q: a replica without TRACING_ENABLED traced", sp.GetName(), id)
		}
	}
}
