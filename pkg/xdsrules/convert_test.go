package xdsrules_test

import (
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

var opts = rules.Options{DefaultAlgorithm: algo.FixedWindow}

// TestBuildSnapshotKeepsTheFileSemantics: every field the proto has means
// what it means in a rule file.
func TestBuildSnapshotKeepsTheFileSemantics(t *testing.T) {
	conf := xdstest.Config("api-rules", "api",
		&rlsconf.RateLimitDescriptor{Key: "user", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "path", Value: "/admin*", ShadowMode: true, DetailedMetric: true,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "admin",
					Replaces: []*rlsconf.RateLimitReplace{{Name: "user"}}}},
		}, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10, Name: "user"}},
		&rlsconf.RateLimitDescriptor{Key: "internal", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
	)
	snap, err := xdsrules.BuildSnapshot([]*rlsconf.RateLimitConfig{conf}, "7", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		entries []algo.Entry
		check   func(*rules.Rule) bool
	}{
		{"top level", []algo.Entry{{Key: "user", Value: "u1"}}, func(r *rules.Rule) bool {
			l := r.Limits[0]
			return l.RequestsPerUnit == 10 && l.Unit == algo.UnitSecond && l.Policy.Algorithm == algo.FixedWindow && l.Name == "user"
		}},
		{"nested wildcard", []algo.Entry{{Key: "user", Value: "u1"}, {Key: "path", Value: "/admin/x"}}, func(r *rules.Rule) bool {
			return r.ShadowMode && r.DetailedMetric && r.Limits[0].RequestsPerUnit == 3 && len(r.Replaces) == 1 && r.Replaces[0] == "user"
		}},
		{"unlimited", []algo.Entry{{Key: "internal", Value: "x"}}, func(r *rules.Rule) bool { return r.Unlimited }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := snap.Match("api", tc.entries)
			if r == nil || !tc.check(r) {
				t.Errorf("rule %+v does not hold what the push says", r)
			}
		})
	}
	if src, _ := snap.Source("api"); src.String() != "xds:api-rules@7" {
		t.Errorf("source %s, want xds:api-rules@7", src)
	}
}

func TestBuildSnapshotRefusesWhatAFileWouldRefuse(t *testing.T) {
	rl := func(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
	}
	for _, tc := range []struct {
		name  string
		confs []*rlsconf.RateLimitConfig
		want  []string
	}{
		{"unknown unit", []*rlsconf.RateLimitConfig{xdstest.Config("c", "d", xdstest.Limit("k", "", rlsconf.RateLimitUnit_UNKNOWN, 1))},
			[]string{"xds:c:", "descriptors[0].rate_limit.unit", "unknown unit"}},
		{"unlimited with a limit", []*rlsconf.RateLimitConfig{xdstest.Config("c", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Unlimited: true}})},
			[]string{"xds:c:", "descriptors[0].rate_limit", "unlimited"}},
		{"duplicate key", []*rlsconf.RateLimitConfig{xdstest.Config("c", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: rl(rlsconf.RateLimitUnit_SECOND, 1)},
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: rl(rlsconf.RateLimitUnit_SECOND, 2)})},
			[]string{"xds:c:", "descriptors[1]", "duplicate"}},
		{"replaces itself", []*rlsconf.RateLimitConfig{xdstest.Config("c", "d",
			&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "n",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}})},
			[]string{"xds:c:", "replaces"}},
		{"no domain", []*rlsconf.RateLimitConfig{xdstest.Config("c", "", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1))},
			[]string{"xds:c:", "domain"}},
		{"no resource name", []*rlsconf.RateLimitConfig{xdstest.Config("", "d", xdstest.Limit("k", "", rlsconf.RateLimitUnit_SECOND, 1))},
			[]string{"no name"}},
		{"no rule", []*rlsconf.RateLimitConfig{xdstest.Config("c", "d", &rlsconf.RateLimitDescriptor{Key: "k"})},
			[]string{"defines no rule"}},
		{"empty push", nil, []string{"defines no rule"}},
		{"every problem", []*rlsconf.RateLimitConfig{
			xdstest.Config("a", "d1", xdstest.Limit("k", "", rlsconf.RateLimitUnit_UNKNOWN, 1)),
			xdstest.Config("b", "d2", xdstest.Limit("", "", rlsconf.RateLimitUnit_SECOND, 1)),
		}, []string{"xds:a:", "xds:b:", "descriptors[0].key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := xdsrules.BuildSnapshot(tc.confs, "1", nil, opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

const extFile = `
domains:
  api:
    defaults:
      algorithm: token_bucket
    limits:
      per_user:
        algorithm: gcra
        burst: 150
        warmup: {period: 10m, from: 0.25}
        hash_tag: user
        rate_limits:
          - {unit: day, requests_per_unit: 10000, name: daily}
`

func TestExtensionsApply(t *testing.T) {
	ext, err := xdsrules.ParseExtensions("ext.yaml", []byte(extFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	conf := xdstest.Config("api-rules", "api",
		&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 100, Name: "per_user"}},
		xdstest.Limit("path", "", rlsconf.RateLimitUnit_MINUTE, 5),
		&rlsconf.RateLimitDescriptor{Key: "internal", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}})
	other := xdstest.Config("web-rules", "web", xdstest.Limit("path", "", rlsconf.RateLimitUnit_MINUTE, 5))
	snap, err := xdsrules.BuildSnapshot([]*rlsconf.RateLimitConfig{conf, other}, "1", ext, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, domain, key string
		algos             []algo.Algorithm
		burst             int64
		hashTag           int
	}{
		{"named limit", "api", "user", []algo.Algorithm{algo.GCRA, algo.FixedWindow}, 150, 0},
		{"domain default", "api", "path", []algo.Algorithm{algo.TokenBucket}, 5, -1},
		{"other domain untouched", "web", "path", []algo.Algorithm{algo.FixedWindow}, 0, -1},
		{"unlimited untouched by defaults", "api", "internal", nil, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := snap.Match(tc.domain, []algo.Entry{{Key: tc.key, Value: "x"}})
			if tc.key == "internal" {
				if r == nil || !r.Unlimited {
					t.Fatalf("rule %+v, want unlimited, the defaults left out", r)
				}
				return
			}
			if r == nil || len(r.Limits) != len(tc.algos) {
				t.Fatalf("rule %+v, want %d limits", r, len(tc.algos))
			}
			for i, a := range tc.algos {
				if r.Limits[i].Policy.Algorithm != a {
					t.Errorf("limit %d algorithm %v, want %v", i, r.Limits[i].Policy.Algorithm, a)
				}
			}
			if tc.burst != 0 && r.Limits[0].Policy.Burst != tc.burst {
				t.Errorf("burst %d, want %d", r.Limits[0].Policy.Burst, tc.burst)
			}
			if r.HashTag != tc.hashTag {
				t.Errorf("hash tag %d, want %d", r.HashTag, tc.hashTag)
			}
			if w := r.Limits[0].Warmup; (w != nil) != (tc.key == "user") || w != nil && (w.Period != 10*time.Minute || w.From != 0.25 || w.Anchor == "") {
				t.Errorf("warmup %+v, want a 10m ramp from 0.25 on the named limit only", w)
			}
		})
	}
}

func TestExtensionsRefuseBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown top-level field", "domain: {}", []string{"ext.yaml", "domain"}},
		{"limit field in defaults", "domains: {api: {defaults: {requests_per_unit: 5}}}",
			[]string{"ext.yaml", "domains.api.defaults", `unknown field "requests_per_unit"`}},
		{"bad algorithm", "domains: {api: {defaults: {algorithm: leaky}}}",
			[]string{"ext.yaml: domains.api.defaults: algorithm", "leaky"}},
		{"burst below 1", "domains: {api: {limits: {x: {algorithm: token_bucket, burst: 0}}}}",
			[]string{"domains.api.limits.x", "burst"}},
		{"rate_limits not a list", "domains: {api: {limits: {x: {rate_limits: 3}}}}",
			[]string{"domains.api.limits.x", "rate_limits"}},
		{"bad extra limit", "domains: {api: {limits: {x: {rate_limits: [{unit: fortnight, requests_per_unit: 1}]}}}}",
			[]string{"domains.api.limits.x: rate_limits[0].unit", "fortnight"}},
		{"bad warmup", "domains: {api: {limits: {x: {warmup: {period: 10m, from: 2}}}}}",
			[]string{"domains.api.limits.x", "warmup.from"}},
		{"sub_windows out of range", "domains: {api: {defaults: {algorithm: sliding_window, sub_windows: 61}}}",
			[]string{"ext.yaml: domains.api.defaults: sub_windows", "1..60"}},
		{"sub_windows of a token bucket", "domains: {api: {limits: {x: {algorithm: token_bucket, sub_windows: 4}}}}",
			[]string{"domains.api.limits.x: sub_windows", "only with sliding_window"}},
		{"every problem", "domains: {a: {defaults: {burst: 0, algorithm: gcra}}, b: {defaults: {unit: second}}}",
			[]string{"domains.a.defaults", "domains.b.defaults"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := xdsrules.ParseExtensions("ext.yaml", []byte(tc.file), opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestExtensionsSubWindows: sub_windows set in the extensions file
// reaches the limit it names; limits it does not name keep the default.
func TestExtensionsSubWindows(t *testing.T) {
	ext, err := xdsrules.ParseExtensions("ext.yaml", []byte("domains: {api: {limits: {per_user: {algorithm: sliding_window, sub_windows: 10}}}}"), opts)
	if err != nil {
		t.Fatal(err)
	}
	conf := xdstest.Config("api-rules", "api",
		&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 100, Name: "per_user"}},
		&rlsconf.RateLimitDescriptor{Key: "path", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 100}})
	snap, err := xdsrules.BuildSnapshot([]*rlsconf.RateLimitConfig{conf}, "1", ext, rules.Options{DefaultAlgorithm: algo.SlidingWindow})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int64{"user": 10, "path": algo.DefaultSubWindows} {
		r := snap.Match("api", []algo.Entry{{Key: key, Value: "x"}})
		if r == nil || len(r.Limits) != 1 || r.Limits[0].Policy.SubWindows != want {
			t.Errorf("%s: rule %+v, want %d sub-windows", key, r, want)
		}
	}
}
