package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlqfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The types the shipped bootstrap's Any fields hold, so that protojson
	// can read them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	// The bucket id builder's input, inside the RLQS filter's Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// The bootstrap of the phase through Envoy (envoy.go) is the shipped
// envoy-config/envoy.yaml with as little changed as a benchmark needs, so
// that the figures are those of the rate-limit filter as we ship it (its
// timeout, failure mode, x-ratelimit headers, gRPC cluster with HTTP/2
// keepalive). This file is the one place that rewrite lives:
//
//   - admin and listener on 127.0.0.1, port 0 (the driver reads the real
//     ports from Envoy's admin);
//   - the listener's access log removed: a stdout line per request would be
//     a cost of the bench's own choosing, the same in every configuration;
//   - the route table replaced by one route to the upstream cluster with
//     one rate_limits entry, (user, <x-user-id>), in the comparison's
//     domain (cmpDomain): the shipped table's five descriptors select rules
//     of examples/config/edge.yaml that only envoy-rls can read, and the
//     comparison needs one rule file both services load (cmpRule);
//   - the rate-limit filter's domain set to cmpDomain, or the filter
//     removed for the floor, or, for RLQS, replaced in place by a
//     rate_limit_quota filter (rlqsFilter: examples/rlqs/envoy.yaml's
//     settings, one bucket per user) on the same gRPC cluster;
//   - the upstream cluster and the rate-limit cluster pointed at loopback
//     addresses (their compose host names do not resolve here); every other
//     cluster dropped.

// envoyListenerName is the shipped listener the driver sends through.
const envoyListenerName = "ingress"

// userHeader carries the descriptor value: the request_headers action
// turns it into (user, <value>).
const userHeader = "x-user-id"

const (
	hcmName       = "envoy.filters.network.http_connection_manager"
	rateLimitName = "envoy.filters.http.ratelimit"
	quotaName     = "envoy.filters.http.rate_limit_quota"
)

// rlqsInstance names the bench's Envoy to envoy-rls (x-rlqs-instance), so
// that every interval's fresh Envoy is the same instance.
const rlqsInstance = "bench-envoy"

// filterMode is what a configuration puts where the shipped rate-limit
// filter is.
type filterMode int

const (
	noFilter     filterMode = iota // the floor
	shouldLimit                    // the shipped filter: a ShouldRateLimit call per request
	quotaBuckets                   // rate_limit_quota: RLQS, decided inside Envoy
)

// benchBootstrap returns the bootstrap, as JSON (which Envoy reads as
// YAML), for one configuration of the phase: shipped is the content of
// envoy-config/envoy.yaml, upstream the loopback host:port of the HTTP
// upstream, rls that of the rate-limit service (ignored with noFilter),
// mode the filter. It also returns the name of the route's target cluster,
// under which Envoy keeps the ShouldRateLimit filter's stats
// (cluster.<name>.ratelimit.*).
func benchBootstrap(shipped []byte, upstream, rls string, mode filterMode) ([]byte, string, error) {
	js, err := yaml.YAMLToJSON(shipped)
	if err != nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: %w", err)
	}
	if b.GetAdmin().GetAddress() == nil {
		return nil, "", errors.New("bench: envoy bootstrap: no admin address")
	}
	b.Admin.Address = loopback(0)

	var lis *listenerv3.Listener
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() == envoyListenerName {
			lis = l
		}
	}
	if lis == nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: no listener %q", envoyListenerName)
	}
	lis.Address = loopback(0)
	if len(lis.GetFilterChains()) != 1 {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: listener %q has %d filter chains, want 1", envoyListenerName, len(lis.GetFilterChains()))
	}
	var hcmAny *anypb.Any
	for _, f := range lis.GetFilterChains()[0].GetFilters() {
		if f.GetName() == hcmName {
			hcmAny = f.GetTypedConfig()
		}
	}
	if hcmAny == nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: listener %q has no %s", envoyListenerName, hcmName)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := hcmAny.UnmarshalTo(&hcm); err != nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: %s: %w", hcmName, err)
	}
	target, err := catchAllCluster(hcm.GetRouteConfig())
	if err != nil {
		return nil, "", err
	}
	hcm.AccessLog = nil
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: benchRoutes(target)}

	keep := map[string]string{target: upstream} // cluster name → address
	var filters []*hcmv3.HttpFilter
	found := false
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() != rateLimitName {
			filters = append(filters, f)
			continue
		}
		found = true
		if mode == noFilter {
			continue
		}
		var rl ratelimitv3.RateLimit
		if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
			return nil, "", fmt.Errorf("bench: envoy bootstrap: %s: %w", rateLimitName, err)
		}
		rl.Domain = cmpDomain
		svc := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		if svc == "" {
			return nil, "", fmt.Errorf("bench: envoy bootstrap: %s names no envoy_grpc cluster", rateLimitName)
		}
		keep[svc] = rls
		if mode == quotaBuckets {
			q, err := rlqsFilter(svc)
			if err != nil {
				return nil, "", err
			}
			f.Name = quotaName
			if err := f.GetTypedConfig().MarshalFrom(q); err != nil {
				return nil, "", fmt.Errorf("bench: envoy bootstrap: %s: %w", quotaName, err)
			}
			filters = append(filters, f)
			continue
		}
		if err := f.GetTypedConfig().MarshalFrom(&rl); err != nil {
			return nil, "", fmt.Errorf("bench: envoy bootstrap: %s: %w", rateLimitName, err)
		}
		filters = append(filters, f)
	}
	if !found {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: no %s filter", rateLimitName)
	}
	hcm.HttpFilters = filters
	if err := hcmAny.MarshalFrom(&hcm); err != nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: %s: %w", hcmName, err)
	}

	var clusters []*clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		addr, ok := keep[c.GetName()]
		if !ok {
			continue
		}
		if err := pointAt(c, addr); err != nil {
			return nil, "", err
		}
		clusters = append(clusters, c)
		delete(keep, c.GetName())
	}
	for name := range keep {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: no cluster %q", name)
	}
	b.StaticResources.Clusters = clusters
	b.StaticResources.Listeners = []*listenerv3.Listener{lis}
	out, err := protojson.Marshal(&b)
	if err != nil {
		return nil, "", fmt.Errorf("bench: envoy bootstrap: %w", err)
	}
	return out, target, nil
}

// rlqsFilterYAML is the bench's rate_limit_quota filter: the settings of
// examples/rlqs/envoy.yaml's catch-all bucket, with the bucket id
// {user: <x-user-id>} (the header (b) and (c) send as their descriptor) in
// cmpDomain, so that envoy-rls matches it to cmpRule (key user, per value)
// and assigns each user's bucket a token bucket of the rule's limit.
// Format verbs: the gRPC cluster, the instance name, the header.
const rlqsFilterYAML = `
domain: ` + cmpDomain + `
rlqs_server:
  envoy_grpc: {cluster_name: %q}
  initial_metadata: [{key: x-rlqs-instance, value: %q}]
bucket_matchers:
  on_no_match:
    action:
      name: user
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
        bucket_id_builder:
          bucket_id_builder:
            user:
              custom_value:
                name: user
                typed_config:
                  "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                  header_name: %q
        reporting_interval: 5s
        no_assignment_behavior:
          fallback_rate_limit: {blanket_rule: ALLOW_ALL}
        expired_assignment_behavior:
          expired_assignment_behavior_timeout: 60s
          fallback_rate_limit: {blanket_rule: ALLOW_ALL}
`

// rlqsFilter is the rate_limit_quota filter's config, on the gRPC cluster
// named cluster.
func rlqsFilter(cluster string) (*rlqfv3.RateLimitQuotaFilterConfig, error) {
	js, err := yaml.YAMLToJSON([]byte(fmt.Sprintf(rlqsFilterYAML, cluster, rlqsInstance, userHeader)))
	if err != nil {
		return nil, fmt.Errorf("bench: envoy bootstrap: %s: %w", quotaName, err)
	}
	var q rlqfv3.RateLimitQuotaFilterConfig
	if err := protojson.Unmarshal(js, &q); err != nil {
		return nil, fmt.Errorf("bench: envoy bootstrap: %s: %w", quotaName, err)
	}
	return &q, nil
}

// catchAllCluster returns the cluster of the shipped route table's
// catch-all route (prefix "/"): the upstream every request goes to.
func catchAllCluster(rc *routev3.RouteConfiguration) (string, error) {
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if r.GetMatch().GetPrefix() == "/" && r.GetRoute().GetCluster() != "" {
				return r.GetRoute().GetCluster(), nil
			}
		}
	}
	return "", errors.New(`bench: envoy bootstrap: no route with prefix "/" to a cluster`)
}

// benchRoutes is the route table of the bench: every request to target,
// with the one descriptor (user, <x-user-id>) that cmpRule limits.
func benchRoutes(target string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: "bench",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "bench",
			Domains: []string{"*"},
			RateLimits: []*routev3.RateLimit{{
				Actions: []*routev3.RateLimit_Action{{
					ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
						RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: userHeader, DescriptorKey: "user"},
					},
				}},
			}},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: target}}},
			}},
		}},
	}
}

// pointAt makes the cluster's one endpoint the loopback host:port addr,
// keeping every other setting (type, timeouts, protocol options).
func pointAt(c *clusterv3.Cluster, addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bench: envoy bootstrap: cluster %s: %w", c.GetName(), err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("bench: envoy bootstrap: cluster %s: %q is not a loopback host:port", c.GetName(), addr)
	}
	sa := loopback(uint32(port))
	sa.GetSocketAddress().Address = host
	c.LoadAssignment = &endpointv3.ClusterLoadAssignment{
		ClusterName: c.GetName(),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sa}},
			}},
		}},
	}
	return nil
}

// loopback is 127.0.0.1:port as Envoy's address type.
func loopback(port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       "127.0.0.1",
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
