package meshconfig

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// loadRules validates rule files (name → contents) the way
// `envoy-rls validate` does, and combines them into one snapshot.
func loadRules(files map[string][]byte) (*rules.Snapshot, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var (
		domains []*rules.Domain
		errs    []error
	)
	for _, n := range names {
		d, err := rules.Parse(n, files[n], rules.Options{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(domains) == 0 {
		return nil, errors.New("no rule files")
	}
	return rules.NewSnapshot(domains...)
}

// exampleRuleFiles reads examples/config, the rules the Envoy config and
// the image ship with.
func exampleRuleFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, n := range repoGlob(t, "examples/config/*.y*ml") {
		files[n] = childproc.ReadRepoFile(t, n)
	}
	return files
}

func mustLoadRules(t *testing.T, files map[string][]byte) *rules.Snapshot {
	t.Helper()
	snap, err := loadRules(files)
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	return snap
}

// d builds a descriptor from key, value pairs.
func d(kv ...string) descriptor {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("meshconfig: odd key/value list %q", kv))
	}
	out := make(descriptor, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		out = append(out, algo.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// Client addresses used by the samples; the two special ones have rules of
// their own in examples/config/edge.yaml.
const (
	clientIP  = "203.0.113.7"
	blockedIP = "192.0.2.66"
	monitorIP = "198.51.100.10"
)

// edgeSamples are requests through the edge (envoy-config/envoy.yaml and
// the Istio ingress gateway) and the rules of domain "edge" each
// descriptor must reach.
func edgeSamples() []sample {
	perIP := wantDescriptor{d("remote_address", clientIP), "edge.remote_address"}
	// login is what every spelling of the login path sends: the route's
	// descriptor first, then the virtual host's.
	login := []wantDescriptor{
		{d("generic_key", "login", "remote_address", clientIP), "edge.generic_key_login.remote_address"},
		perIP,
		{d("route", "login"), "edge.route_login"},
	}
	return []sample{
		{
			name: "anonymous request: per-IP only; a path outside the routes sends no route",
			req:  sampleRequest{remote: clientIP, path: "/"},
			want: []wantDescriptor{perIP},
		},
		{
			name: "blocked client",
			req:  sampleRequest{remote: blockedIP, path: "/"},
			want: []wantDescriptor{{d("remote_address", blockedIP), "edge.remote_address_" + blockedIP}},
		},
		{
			name: "uptime monitor on /healthz",
			req:  sampleRequest{remote: monitorIP, path: "/healthz"},
			want: []wantDescriptor{
				{d("remote_address", monitorIP), "edge.remote_address_" + monitorIP},
				{d("route", "healthz"), "edge.route_healthz"},
			},
		},
		{
			name: "signed-in user on an API path",
			req:  sampleRequest{remote: clientIP, path: "/api/orders?page=2", headers: map[string]string{"x-user-id": "alice"}},
			want: []wantDescriptor{
				perIP,
				{d("user_id", "alice"), "edge.user_id"},
				{d("route", "api"), "edge.route_api"},
			},
		},
		{
			name: "partner tier adds the tier descriptor",
			req:  sampleRequest{remote: clientIP, path: "/", headers: map[string]string{"x-user-id": "alice", "x-api-tier": "partner"}},
			want: []wantDescriptor{
				perIP,
				{d("user_id", "alice"), "edge.user_id"},
				{d("tier", "partner", "user_id", "alice"), "edge.tier_partner.user_id"},
			},
		},
		{
			name: "another tier matches no tier rule",
			req:  sampleRequest{remote: clientIP, path: "/", headers: map[string]string{"x-user-id": "bob", "x-api-tier": "free"}},
			want: []wantDescriptor{
				perIP,
				{d("user_id", "bob"), "edge.user_id"},
				{d("tier", "free", "user_id", "bob"), ""},
			},
		},
		{
			name: "login: the route's descriptor first, then the virtual host's",
			req:  sampleRequest{remote: clientIP, method: "POST", path: "/api/login"},
			want: login,
		},
		{
			name: "login with a query: the same route and the same login rules",
			req:  sampleRequest{remote: clientIP, method: "POST", path: "/api/login?next=/home"},
			want: login,
		},
		{
			name: "login with a trailing slash: the same login rules",
			req:  sampleRequest{remote: clientIP, method: "POST", path: "/api/login/"},
			want: login,
		},
		{
			name: "/api itself with a query is an API path",
			req:  sampleRequest{remote: clientIP, path: "/api?x=1"},
			want: []wantDescriptor{perIP, {d("route", "api"), "edge.route_api"}},
		},
		{
			name: "a path that only starts like /api is none",
			req:  sampleRequest{remote: clientIP, path: "/apix"},
			want: []wantDescriptor{perIP},
		},
		{
			name: "a user's write to the API",
			req:  sampleRequest{remote: clientIP, method: "POST", path: "/api/orders", headers: map[string]string{"x-user-id": "alice"}},
			want: []wantDescriptor{
				perIP,
				{d("user_id", "alice"), "edge.user_id"},
				{d("route", "api"), "edge.route_api"},
				{d("header_match", "write", "user_id", "alice"), "edge.header_match_write.user_id"},
			},
		},
		{
			name: "a write outside /api/ is not a write",
			req:  sampleRequest{remote: clientIP, method: "PUT", path: "/upload", headers: map[string]string{"x-user-id": "alice"}},
			want: []wantDescriptor{
				perIP,
				{d("user_id", "alice"), "edge.user_id"},
			},
		},
	}
}

func TestEnvoyConfigDescriptorsReachIntendedRules(t *testing.T) {
	snap := mustLoadRules(t, exampleRuleFiles(t))
	for _, name := range envoyConfigFiles(t) {
		t.Run(path.Base(name), func(t *testing.T) {
			for _, p := range mustLoadBootstrap(t, name) {
				if err := checkSamples(name+": "+p.where, p.filter, p.vhosts, snap, edgeSamples()); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
