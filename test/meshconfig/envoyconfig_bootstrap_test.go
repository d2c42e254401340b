package meshconfig

import (
	"errors"
	"fmt"
	"path"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Names that Envoy uses for the pieces the shipped configs wire together.
const (
	hcmFilterName       = "envoy.filters.network.http_connection_manager"
	rateLimitFilterName = "envoy.filters.http.ratelimit"
	routerFilterName    = "envoy.filters.http.router"
	httpOptionsKey      = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// edgeProxy is what the simulator needs from one HTTP connection manager:
// the rate-limit filter's configuration and the routes it applies to.
type edgeProxy struct {
	where  string
	filter *ratelimitv3.RateLimit
	vhosts []*routev3.VirtualHost
}

// loadBootstrap parses an Envoy YAML bootstrap strictly, validates every
// message in it, and checks how its parts are wired (see checkBootstrap).
func loadBootstrap(name string, data []byte) (*bootstrapv3.Bootstrap, []edgeProxy, error) {
	var b bootstrapv3.Bootstrap
	if err := unmarshalYAML(data, &b); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := validateTree(&b); err != nil {
		return nil, nil, fmt.Errorf("%s: invalid bootstrap:\n%w", name, err)
	}
	proxies, err := checkBootstrap(&b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return &b, proxies, nil
}

// checkBootstrap checks what protoc-gen-validate cannot: that the rate-limit
// filter runs before the router and talks gRPC (HTTP/2) to a cluster that
// exists, that routes point at clusters that exist, and that rate limits
// are configured at all. It returns one edgeProxy per connection manager.
func checkBootstrap(b *bootstrapv3.Bootstrap) ([]edgeProxy, error) {
	var errs []error
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	var proxies []edgeProxy
	for _, l := range b.GetStaticResources().GetListeners() {
		for ci, fc := range l.GetFilterChains() {
			for fi, f := range fc.GetFilters() {
				where := fmt.Sprintf("listener %q filter_chains[%d].filters[%d]", l.GetName(), ci, fi)
				if f.GetName() != hcmFilterName {
					continue
				}
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					errs = append(errs, fmt.Errorf("%s: typed_config is not an HttpConnectionManager: %w", where, err))
					continue
				}
				p, perrs := checkConnectionManager(where, &hcm)
				errs = append(errs, perrs...)
				errs = append(errs, routeClusterErrors(where, p.vhosts, clusters)...)
				if p.filter != nil {
					name := p.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
					if c, ok := clusters[name]; !ok {
						errs = append(errs, fmt.Errorf("%s: rate_limit_service names cluster %q, which static_resources does not define", where, name))
					} else if err := checkHTTP2(c); err != nil {
						errs = append(errs, err)
					}
				}
				proxies = append(proxies, p)
			}
		}
	}
	if len(proxies) == 0 {
		errs = append(errs, errors.New("no listener has an HTTP connection manager"))
	}
	return proxies, errors.Join(errs...)
}

// checkConnectionManager checks the HTTP filter chain and the inline route
// configuration of one connection manager.
func checkConnectionManager(where string, hcm *hcmv3.HttpConnectionManager) (edgeProxy, []error) {
	p := edgeProxy{where: where, vhosts: hcm.GetRouteConfig().GetVirtualHosts()}
	var errs []error
	if hcm.GetRouteConfig() == nil {
		errs = append(errs, fmt.Errorf("%s: want an inline route_config (the simulator reads its rate_limits)", where))
	}
	filters := hcm.GetHttpFilters()
	rl, router := -1, -1
	for i, hf := range filters {
		switch hf.GetName() {
		case rateLimitFilterName:
			cfg, ferrs := checkRateLimitFilter(fmt.Sprintf("%s http_filters[%d]", where, i), hf)
			errs = append(errs, ferrs...)
			p.filter, rl = cfg, i
		case routerFilterName:
			if router >= 0 {
				errs = append(errs, fmt.Errorf("%s: http_filters[%d]: a second %s", where, i, routerFilterName))
			} else {
				router = i
			}
		}
	}
	switch {
	case rl < 0:
		errs = append(errs, fmt.Errorf("%s: no %s in http_filters", where, rateLimitFilterName))
	case router < 0:
		errs = append(errs, fmt.Errorf("%s: no %s in http_filters", where, routerFilterName))
	case rl > router:
		errs = append(errs, fmt.Errorf("%s: %s must come before %s (filters after the router never run)", where, rateLimitFilterName, routerFilterName))
	case router != len(filters)-1:
		errs = append(errs, fmt.Errorf("%s: %s must be the last http filter", where, routerFilterName))
	}
	n := 0
	for _, vh := range p.vhosts {
		n += len(vh.GetRateLimits())
		for _, r := range vh.GetRoutes() {
			n += len(r.GetRoute().GetRateLimits())
		}
	}
	if n == 0 && len(p.filter.GetRateLimits()) == 0 {
		errs = append(errs, fmt.Errorf("%s: no rate_limits on any virtual host or route: the filter would never call envoy-rls", where))
	}
	return p, errs
}

// checkRateLimitFilter unpacks the envoy.filters.http.ratelimit filter and
// checks the settings the deployment relies on.
func checkRateLimitFilter(where string, hf *hcmv3.HttpFilter) (*ratelimitv3.RateLimit, []error) {
	var cfg ratelimitv3.RateLimit
	if err := anyTo(hf.GetTypedConfig(), &cfg); err != nil {
		return nil, []error{fmt.Errorf("%s: %w", where, err)}
	}
	var errs []error
	if cfg.GetDomain() == "" {
		errs = append(errs, fmt.Errorf("%s: domain is empty", where))
	}
	if cfg.GetTimeout() == nil {
		errs = append(errs, fmt.Errorf("%s: timeout is unset (Envoy's 20ms default is too tight for a networked Redis)", where))
	}
	rls := cfg.GetRateLimitService()
	if rls.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		errs = append(errs, fmt.Errorf("%s: rate_limit_service.transport_api_version is %v, want V3", where, rls.GetTransportApiVersion()))
	}
	if rls.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
		errs = append(errs, fmt.Errorf("%s: rate_limit_service.grpc_service.envoy_grpc.cluster_name is empty", where))
	}
	if cfg.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		errs = append(errs, fmt.Errorf("%s: enable_x_ratelimit_headers is %v, want DRAFT_VERSION_03", where, cfg.GetEnableXRatelimitHeaders()))
	}
	return &cfg, errs
}

// anyTo unpacks a into m, naming both types when they differ.
func anyTo(a *anypb.Any, m proto.Message) error {
	if a == nil {
		return errors.New("typed_config is missing")
	}
	if err := a.UnmarshalTo(m); err != nil {
		return fmt.Errorf("typed_config %q: %w", a.GetTypeUrl(), err)
	}
	return nil
}

// checkHTTP2 checks that cluster c speaks HTTP/2, which gRPC requires. A
// cluster without it gets HTTP/1.1 and every rate-limit call fails at run
// time, which no schema check notices.
func checkHTTP2(c *clusterv3.Cluster) error {
	raw, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if !ok {
		return fmt.Errorf("cluster %q: no typed_extension_protocol_options[%q]: gRPC needs HTTP/2", c.GetName(), httpOptionsKey)
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := raw.UnmarshalTo(&opts); err != nil {
		return fmt.Errorf("cluster %q: typed_extension_protocol_options[%q]: %w", c.GetName(), httpOptionsKey, err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return fmt.Errorf("cluster %q: want explicit_http_config.http2_protocol_options: gRPC needs HTTP/2", c.GetName())
	}
	return nil
}

// routeClusterErrors reports routes whose target cluster is not defined.
func routeClusterErrors(where string, vhosts []*routev3.VirtualHost, clusters map[string]*clusterv3.Cluster) []error {
	var errs []error
	for _, vh := range vhosts {
		for ri, r := range vh.GetRoutes() {
			name := r.GetRoute().GetCluster()
			if name == "" {
				continue
			}
			if _, ok := clusters[name]; !ok {
				errs = append(errs, fmt.Errorf("%s: virtual host %q routes[%d] targets cluster %q, which static_resources does not define", where, vh.GetName(), ri, name))
			}
		}
	}
	return errs
}

// envoyConfigFiles lists the shipped Envoy bootstraps.
func envoyConfigFiles(t *testing.T) []string {
	t.Helper()
	return repoGlob(t, "envoy-config/*.yaml")
}

// mustLoadBootstrap loads the shipped bootstrap name, failing t when it
// does not parse, validate or wire up, and returns its connection managers.
func mustLoadBootstrap(t *testing.T, name string) []edgeProxy {
	t.Helper()
	_, proxies, err := loadBootstrap(name, childproc.ReadRepoFile(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return proxies
}

func TestEnvoyBootstrapsParseAndValidate(t *testing.T) {
	for _, name := range envoyConfigFiles(t) {
		t.Run(path.Base(name), func(t *testing.T) {
			for _, p := range mustLoadBootstrap(t, name) {
				if p.filter == nil {
					t.Errorf("%s: no rate-limit filter", p.where)
				}
			}
		})
	}
}
