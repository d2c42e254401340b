package meshconfig

import (
	"fmt"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
)

// TestSimulatorSemantics pins the Envoy behaviours the simulator models,
// on small configurations written for the purpose.
func TestSimulatorSemantics(t *testing.T) {
	const vhLimits = `
  rate_limits:
  - actions: [{generic_key: {descriptor_value: vh}}]`
	route := func(extra string) string {
		return `
  routes:
  - name: r
    match: {prefix: /}
    route:
      cluster: c
      rate_limits:
      - actions: [{generic_key: {descriptor_value: route}}]
      - stage: 1
        actions: [{generic_key: {descriptor_value: stage1}}]` + extra
	}
	perRoute := func(option string) string {
		return `
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        vh_rate_limits: ` + option
	}
	actions := func(list string) string {
		return `
  routes:
  - match: {prefix: /}
    route:
      cluster: backend
      rate_limits:
      - actions: ` + list
	}
	alice := map[string]string{"x-user": "alice"}
	for _, tc := range []struct {
		name    string
		vhost   string
		req     sampleRequest
		want    string // descriptors, one per line
		wantErr string
	}{
		{name: "OVERRIDE (default): a route with limits drops the virtual host's; other stages are skipped",
			vhost: vhLimits + route(""), want: `[("generic_key", "route")]`},
		{name: "INCLUDE: the route's, then the virtual host's",
			vhost: vhLimits + route(perRoute("INCLUDE")), want: `[("generic_key", "route")]` + "\n" + `[("generic_key", "vh")]`},
		{name: "IGNORE: never the virtual host's",
			vhost: vhLimits + `
  routes:
  - match: {prefix: /}
    route: {cluster: c}` + perRoute("IGNORE")},
		{name: "OVERRIDE: a route without limits takes the virtual host's",
			vhost: vhLimits + `
  routes:
  - match: {prefix: /}
    route: {cluster: c}`, want: `[("generic_key", "vh")]`},
		{name: "a missing header drops the descriptor",
			vhost: actions(`[{request_headers: {header_name: x-user, descriptor_key: user}}, {generic_key: {descriptor_value: g}}]`)},
		{name: "skip_if_absent drops only the entry",
			vhost: actions(`[{request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}}, {generic_key: {descriptor_value: g}}]`),
			want:  `[("generic_key", "g")]`},
		{name: "header names are case-insensitive; default generic_key and header_match keys",
			vhost: actions(`[{request_headers: {header_name: X-User, descriptor_key: user}}, {header_value_match: {descriptor_value: m, headers: [{name: x-user, string_match: {exact: ALICE, ignore_case: true}}]}}]`),
			req:   sampleRequest{headers: alice}, want: `[("user", "alice"), ("header_match", "m")]`},
		{name: "expect_match false appends when the headers do not match",
			vhost: actions(`[{header_value_match: {descriptor_value: anon, expect_match: false, headers: [{name: x-user, present_match: true}]}}]`),
			want:  `[("header_match", "anon")]`},
		{name: "expect_match false drops the descriptor when they match",
			vhost: actions(`[{header_value_match: {descriptor_value: anon, expect_match: false, headers: [{name: x-user, present_match: true}]}}]`),
			req:   sampleRequest{headers: alice}},
		{name: "invert_match does not make a missing header match",
			vhost: actions(`[{header_value_match: {descriptor_value: v, headers: [{name: x-user, invert_match: true, string_match: {exact: bob}}]}}]`)},
		{name: "safe_regex must match the whole value",
			vhost: actions(`[{header_value_match: {descriptor_value: v, headers: [{name: ":path", string_match: {safe_regex: {regex: "/a"}}}]}}]`),
			req:   sampleRequest{path: "/ab"}},
		{name: "query_parameters and masked_remote_address and destination_cluster",
			vhost: actions(`[{query_parameters: {query_parameter_name: k, descriptor_key: q}}, {masked_remote_address: {v4_prefix_mask_len: 24}}, {destination_cluster: {}}]`),
			req:   sampleRequest{remote: "203.0.113.7", path: "/x?k=v"},
			want:  `[("q", "v"), ("masked_remote_address", "203.0.113.0/24"), ("destination_cluster", "backend")]`},
		{name: "an action the simulator does not model is an error, not a guess",
			vhost:   actions(`[{source_cluster: {}}]`),
			wantErr: "unsupported action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rc routev3.RouteConfiguration
			if err := unmarshalYAML([]byte("virtual_hosts:\n- name: v\n  domains: ['*']"+tc.vhost), &rc); err != nil {
				t.Fatal(err)
			}
			if err := validateTree(&rc); err != nil {
				t.Fatalf("test configuration is invalid: %v", err)
			}
			if tc.req.path == "" {
				tc.req.path = "/"
			}
			got, err := simulate(&ratelimitv3.RateLimit{Domain: "d"}, rc.GetVirtualHosts(), tc.req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := make([]string, len(got))
			for i, d := range got {
				lines[i] = fmt.Sprint(d)
			}
			if s := strings.Join(lines, "\n"); s != tc.want {
				t.Fatalf("descriptors:\n%s\nwant:\n%s", s, tc.want)
			}
		})
	}
}
