package meshconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// keepaliveMinTimeDecl finds the default of envoy-rls's
// --grpc-keepalive-min-time in its source, so this check follows the flag.
var keepaliveMinTimeDecl = regexp.MustCompile(`"grpc-keepalive-min-time",\s*(\d+)\s*\*\s*time\.Second`)

// serverKeepaliveMinTime is the shortest client ping interval envoy-rls
// accepts by default.
func serverKeepaliveMinTime(t testing.TB) time.Duration {
	t.Helper()
	for _, f := range flagSources(t) {
		if m := keepaliveMinTimeDecl.FindSubmatch(childproc.ReadRepoFile(t, f)); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			return time.Duration(n) * time.Second
		}
	}
	t.Fatal("meshconfig: no --grpc-keepalive-min-time declaration in internal/serveconfig; has its style changed?")
	return 0
}

// checkRLSTransport checks the clusters that reach envoy-rls beyond what
// checkBootstrap sees: a cluster on a Unix socket (pipe) is an envoy-rls
// sidecar and must speak HTTP/2 even when no filter names it yet, and an
// HTTP/2 keepalive may not ping more often than envoy-rls allows, or
// envoy-rls closes the connection (too_many_pings).
func checkRLSTransport(name string, b *bootstrapv3.Bootstrap, minPing time.Duration) error {
	var errs []error
	for _, c := range b.GetStaticResources().GetClusters() {
		pipe := false
		for _, ep := range c.GetLoadAssignment().GetEndpoints() {
			for _, lb := range ep.GetLbEndpoints() {
				pipe = pipe || lb.GetEndpoint().GetAddress().GetPipe() != nil
			}
		}
		if pipe {
			if err := checkHTTP2(c); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		raw, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
		if !ok {
			continue
		}
		var opts upstreamhttpv3.HttpProtocolOptions
		if err := raw.UnmarshalTo(&opts); err != nil {
			continue // checkBootstrap reports it
		}
		ka := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetConnectionKeepalive()
		if ka != nil && ka.GetInterval() != nil && ka.GetInterval().AsDuration() < minPing {
			errs = append(errs, fmt.Errorf("%s: cluster %q pings every %v, more often than envoy-rls's --grpc-keepalive-min-time (%v) allows: envoy-rls would close its connections", name, c.GetName(), ka.GetInterval().AsDuration(), minPing))
		}
	}
	return errors.Join(errs...)
}

func TestEnvoyConfigRLSTransport(t *testing.T) {
	minPing := serverKeepaliveMinTime(t)
	pipes := 0
	for _, name := range envoyConfigFiles(t) {
		b, _, err := loadBootstrap(name, childproc.ReadRepoFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkRLSTransport(name, b, minPing); err != nil {
			t.Error(err)
		}
		for _, c := range b.GetStaticResources().GetClusters() {
			for _, ep := range c.GetLoadAssignment().GetEndpoints() {
				for _, lb := range ep.GetLbEndpoints() {
					if lb.GetEndpoint().GetAddress().GetPipe() != nil {
						pipes++
					}
				}
			}
		}
	}
	if pipes == 0 {
		t.Error("no shipped Envoy config shows envoy-rls on a Unix socket (a pipe endpoint)")
	}
}
