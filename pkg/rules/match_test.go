package rules

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/upstream"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

func mustSnapshot(t testing.TB, files map[string]string) *Snapshot {
	t.Helper()
	var domains []*Domain
	for name, y := range files {
		d, err := Parse(name, doc(y), Options{})
		if err != nil {
			t.Fatalf("Parse(%s): %v", name, err)
		}
		domains = append(domains, d)
	}
	s, err := NewSnapshot(domains...)
	if err != nil {
		t.Fatalf("NewSnapshot: %v", err)
	}
	return s
}

// entries builds a descriptor from "key=value" strings.
func entries(kv ...string) []algo.Entry {
	out := make([]algo.Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = algo.Entry{Key: k, Value: v}
	}
	return out
}

const matchConfig = `
domain: test
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {name: nested, unit: second, requests_per_unit: 5}
  - key: key1
    rate_limit: {name: key1_any, unit: minute, requests_per_unit: 10}
    descriptors:
      - key: other
        rate_limit: {name: key1_any_other, unit: minute, requests_per_unit: 11}
  - key: key2
    value: foo*
    rate_limit: {name: wild_foo, unit: second, requests_per_unit: 1}
  - key: key2
    value: f*
    rate_limit: {name: wild_f, unit: second, requests_per_unit: 2}
  - key: key2
    value: foobar
    rate_limit: {name: exact_foobar, unit: second, requests_per_unit: 3}
  - key: key2
    rate_limit: {name: key2_any, unit: second, requests_per_unit: 4}
  - key: key3
    value: "*"
    rate_limit: {name: any3, unit: second, requests_per_unit: 6}
  - key: a_b
    rate_limit: {name: underscore_key, unit: second, requests_per_unit: 7}
  - key: a
    value: b_c
    rate_limit: {name: underscore_value, unit: second, requests_per_unit: 8}
  - key: remote_address
    rate_limit: {name: per_ip, unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {name: blocked, unit: second, requests_per_unit: 0}
  - key: placeholder
    descriptors:
      - key: deep
        value: x
        descriptors:
          - key: deeper
            rate_limit: {name: three_levels, unit: hour, requests_per_unit: 9}
`

func TestMatch(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"test.yaml": matchConfig})
	tests := []struct {
		name    string
		domain  string
		entries []algo.Entry
		want    string // rule ID, "" for no rule
	}{
		{"nested exact then key", "test", entries("key1=value1", "subkey1=anything"), "nested"},
		{"placeholder without limit", "test", entries("key1=value1"), ""},
		{"key alone when no exact value", "test", entries("key1=other"), "key1_any"},
		{"key alone then nested", "test", entries("key1=zzz", "other=1"), "key1_any_other"},
		{"no backtracking from exact to key alone", "test", entries("key1=value1", "other=1"), ""},
		{"deeper than the tree", "test", entries("key1=value1", "subkey1=x", "extra=y"), ""},
		{"deeper than a leaf", "test", entries("key2=bar", "extra=y"), ""},
		{"first wildcard in file order", "test", entries("key2=foo1"), "wild_foo"},
		{"second wildcard", "test", entries("key2=fab"), "wild_f"},
		{"exact beats an earlier wildcard", "test", entries("key2=foobar"), "exact_foobar"},
		{"wildcard by its literal value", "test", entries("key2=foo*"), "wild_foo"},
		{"wildcard prefix itself", "test", entries("key2=foo"), "wild_foo"},
		{"key alone after wildcards", "test", entries("key2=bar"), "key2_any"},
		{"empty value matches a bare star", "test", entries("key3="), "any3"},
		{"bare star", "test", entries("key3=anything"), "any3"},
		{"specific value wins (upstream example 3)", "test", entries("remote_address=50.0.0.5"), "blocked"},
		{"key default (upstream example 3)", "test", entries("remote_address=50.0.0.1"), "per_ip"},
		{"three levels", "test", entries("placeholder=p", "deep=x", "deeper=1"), "three_levels"},
		{"three levels, wrong middle value", "test", entries("placeholder=p", "deep=y", "deeper=1"), ""},
		{"unknown key", "test", entries("nope=x"), ""},
		{"key a_b is not key a with value b", "test", entries("a=b"), ""},
		{"key a_b value c is key a_b, not key a value b_c", "test", entries("a_b=c"), "underscore_key"},
		{"pair compared as a pair", "test", entries("a=b_c"), "underscore_value"},
		{"unknown domain", "other", entries("key2=bar"), ""},
		{"no entries", "test", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if r := s.Match(tt.domain, tt.entries); r != nil {
				got = r.ID
			}
			if got != tt.want {
				t.Errorf("Match(%s, %v) = %q, want %q", tt.domain, tt.entries, got, tt.want)
			}
			// Explain must agree with Match on every case.
			if ex := s.Explain(tt.domain, tt.entries); ex.Rule != s.Match(tt.domain, tt.entries) || (ex.Rule == nil) != (ex.Reason != "") {
				t.Errorf("Explain(%s, %v) = rule %v, reason %q; Match says %q", tt.domain, tt.entries, ex.Rule, ex.Reason, got)
			}
		})
	}
}

func TestNilSnapshot(t *testing.T) {
	var s *Snapshot
	if s.Match("d", entries("a=b")) != nil || s.HasDomain("d") || s.Domains() != nil || s.NumRules() != 0 {
		t.Errorf("nil snapshot is not empty")
	}
}

// Upstream's README example 7: the names and replaces a request's rules
// carry, which pkg/rls uses to drop replaced limits.
func TestMatchReplaces(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"ex7.yaml": upstream.Example7})
	a := s.Match("example7", entries("key_1=value_1", "user=bkthomps"))
	b := s.Match("example7", entries("key_2=value_2", "user=bkthomps"))
	if a == nil || b == nil {
		t.Fatalf("Match = %v, %v; want two rules", a, b)
	}
	if a.Limits[0].Name != "specific_limit" || len(a.Replaces) != 0 {
		t.Errorf("first rule: name %q replaces %q; want specific_limit and none", a.Limits[0].Name, a.Replaces)
	}
	if b.Limits[0].Name != "" || !reflect.DeepEqual(b.Replaces, []string{"specific_limit"}) || b.ID != "example7.key_2_value_2.user_bkthomps" {
		t.Errorf("second rule: name %q replaces %q id %q; want unnamed, [specific_limit], its path", b.Limits[0].Name, b.Replaces, b.ID)
	}
}

func TestKeyEntries(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"k.yaml": `
domain: k
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /static/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    value: trial-*
    share_threshold: true
    descriptors:
      - key: user
        hash_tag: user
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: region
        value: eu-*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    hash_tag: user
    descriptors:
      - key: action
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: op
        hash_tag: op
        rate_limit: {unit: second, requests_per_unit: 1}
`})
	tests := []struct {
		name    string
		req     []algo.Entry
		want    []algo.Entry
		share   bool
		hashTag int
	}{
		{"shared wildcard", entries("path=/api/orders?page=2"), entries("path=/api/*"), true, -1},
		{"wildcard literal value", entries("path=/api/*"), entries("path=/api/*"), true, -1},
		{"wildcard without sharing keeps the value", entries("path=/static/app.js"), entries("path=/static/app.js"), false, -1},
		{"shared ancestor", entries("tenant=trial-7", "user=u1"), entries("tenant=trial-*", "user=u1"), true, 1},
		{"shared at two levels", entries("tenant=trial-7", "region=eu-west-1"), entries("tenant=trial-*", "region=eu-*"), true, -1},
		{"inherited hash_tag", entries("user=u1", "action=buy"), entries("user=u1", "action=buy"), false, 0},
		{"own hash_tag", entries("user=u1", "op=x"), entries("user=u1", "op=x"), false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.Match("k", tt.req)
			if r == nil {
				t.Fatalf("Match(%v) = nil", tt.req)
			}
			prefix := entries("keep=me")
			got := r.KeyEntries(tt.req, prefix)
			if !reflect.DeepEqual(got, append(entries("keep=me"), tt.want...)) {
				t.Errorf("KeyEntries = %v, want keep=me then %v", got, tt.want)
			}
			if r.ShareThreshold != tt.share || r.HashTag != tt.hashTag {
				t.Errorf("ShareThreshold, HashTag = %v, %d; want %v, %d", r.ShareThreshold, r.HashTag, tt.share, tt.hashTag)
			}
		})
	}
	// The request's own entries are never modified.
	req := entries("path=/api/x")
	s.Match("k", req).KeyEntries(req, nil)
	if req[0].Value != "/api/x" {
		t.Errorf("KeyEntries modified the request: %v", req)
	}
}

func TestSnapshotDomains(t *testing.T) {
	s := mustSnapshot(t, map[string]string{
		"b.yaml": "domain: beta\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		"a.yaml": "domain: alpha\ndescriptors: [{key: k, rate_limit: {unlimited: true}}, {key: j}]\n",
	})
	var names []string
	for _, d := range s.Domains() {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"alpha", "beta"}) || s.NumRules() != 2 || !s.HasDomain("beta") || s.HasDomain("gamma") {
		t.Errorf("domains %q, %d rules; want [alpha beta], 2 rules", names, s.NumRules())
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	var dump struct {
		Domains []struct {
			Domain string
			File   string
			Rules  []struct {
				ID        string
				Unlimited bool
				Limits    []struct {
					Unit      string
					Algorithm string
					PeriodUS  int64 `json:"period_us"`
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &dump); err != nil {
		t.Fatalf("dump does not round-trip: %v\n%s", err, raw)
	}
	if len(dump.Domains) != 2 || dump.Domains[0].Domain != "alpha" || !dump.Domains[0].Rules[0].Unlimited ||
		dump.Domains[1].Rules[0].Limits[0].Algorithm != "sliding_window" || dump.Domains[1].Rules[0].Limits[0].PeriodUS != algo.Second {
		t.Errorf("unexpected dump: %s", raw)
	}
}

func TestDuplicateDomain(t *testing.T) {
	a, _ := Parse("a.yaml", []byte("domain: edge\n"), Options{})
	b, _ := Parse("b.yaml", []byte("# b\ndomain: edge\n"), Options{})
	_, err := NewSnapshot(a, b)
	want := `b.yaml:2: domain: duplicate domain "edge" (first in a.yaml:1; want each domain in one file, or --merge-domain-config)`
	if err == nil || err.Error() != want {
		t.Errorf("NewSnapshot = %v, want %s", err, want)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"test.yaml": matchConfig})
	reqs := [][]algo.Entry{
		entries("key1=value1", "subkey1=x"),
		entries("key1=zzz", "other=1"),
		entries("key2=fab"),
		entries("nope=1", "x=2"),
	}
	dst := make([]algo.Entry, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		for _, req := range reqs {
			if r := s.Match("test", req); r != nil {
				dst = r.KeyEntries(req, dst[:0])
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Match + KeyEntries allocate %v times per run, want 0", allocs)
	}
}

func BenchmarkMatch(b *testing.B) {
	s := mustSnapshot(b, map[string]string{"test.yaml": matchConfig})
	benchmarks := []struct {
		name string
		req  []algo.Entry
	}{
		{"exact+key", entries("key1=value1", "subkey1=x")},
		{"key+key", entries("key1=zzz", "other=1")},
		{"wildcard", entries("key2=fab")},
		{"miss", entries("nope=1", "x=2")},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Match("test", bm.req)
			}
		})
	}
}

// wildcardYAML is envoyproxy/ratelimit's test/config/wildcard.yaml, with the
// middle and multiple wildcards its TestWildcardConfig matches.
const wildcardYAML = `
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noWild
    value: foo
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noVal
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 20}
`

// TestMatchWildcardAnywhere replays envoyproxy/ratelimit's TestWildcardConfig
// and the matching half of its TestShareThreshold: a "*" matches any run of
// bytes, the empty one included, wherever it stands in the value, and the
// rule's path (the reference's stats key) keeps the pattern.
func TestMatchWildcardAnywhere(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"wildcard.yaml": wildcardYAML})
	tests := []struct {
		name    string
		entries []algo.Entry
		want    string // rule path, "" for no rule
	}{
		{"key alone", entries("noVal=foo1"), "test-domain.noVal"},
		{"trailing", entries("wild=foo1"), "test-domain.wild_foo*"},
		{"nested trailing", entries("nestedWild=val1", "wild=goo2"), "test-domain.nestedWild_val1.wild_goo*"},
		{"trailing, no match", entries("wild=bar"), ""},
		{"literal value is no pattern", entries("noWild=foo1"), ""},
		{"middle", entries("midWild=barab"), "test-domain.midWild_bar*b"},
		{"middle, longer run", entries("midWild=bar123b"), "test-domain.midWild_bar*b"},
		{"middle, empty run", entries("midWild=barb"), "test-domain.midWild_bar*b"},
		{"middle, suffix missing", entries("midWild=bara"), ""},
		{"middle, prefix missing", entries("midWild=xbarb"), ""},
		{"middle, prefix and suffix overlap", entries("midWild=bar"), ""},
		{"multiple", entries("multiWild=foo123bar456baz"), "test-domain.multiWild_foo*bar*baz"},
		{"multiple, empty runs", entries("multiWild=foobarbaz"), "test-domain.multiWild_foo*bar*baz"},
		{"multiple, middle segment missing", entries("multiWild=foo123baz"), ""},
		{"multiple, prefix missing", entries("multiWild=bar456baz"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if r := s.Match("test-domain", tt.entries); r != nil {
				got = r.Path
			}
			if got != tt.want {
				t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"a*", "a", true},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*a", "a", false}, // the prefix and the suffix may not share a byte
		{"a*a", "aa", true},
		{"a**b", "ab", true},
		{"*ep*", "svcep", true},
		{"svc*ep*rpc", "svcAepBrpc", true},
		{"svc*ep*rpc", "svceprpc", true},
		{"svc*ep*rpc", "svcABCrpc", false},
		{"svc*ep*rpc", "svcrpcep", false},
		{"/api*v1", "/api/v2", false},
		{"x*y*y", "xyy", true},
		{"x*y*y", "xy", false},
	}
	for _, tt := range tests {
		g := newGlob(tt.pattern)
		if got := g.match(tt.value); got != tt.want {
			t.Errorf("glob %q matches %q = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

// shareThresholdYAML is envoyproxy/ratelimit's test/config/share_threshold.yaml
// (trimmed to the middle and multiple wildcard cases and the precedence
// case), which envoy-rls refused before it accepted "*" anywhere.
const shareThresholdYAML = `
domain: test-domain
descriptors:
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 80}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`

// TestShareThresholdWildcardAnywhere checks that values matched by a middle
// or multiple wildcard with share_threshold count against the pattern, as
// envoyproxy/ratelimit's TestShareThreshold cases 4 to 8 expect, and that an
// exact value still wins over a shared wildcard.
func TestShareThresholdWildcardAnywhere(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"share_threshold.yaml": shareThresholdYAML})
	tests := []struct {
		name string
		req  []algo.Entry
		rpu  uint32
		want []algo.Entry // KeyEntries; nil for no rule
	}{
		{"exact wins", entries("file=test1"), 50, entries("file=test1")},
		{"shared trailing", entries("file=test23"), 100, entries("file=test*")},
		{"shared middle", entries("midpath=/api/v1"), 100, entries("midpath=/api*v1")},
		{"shared middle, other value", entries("midpath=/apiXYZv1"), 100, entries("midpath=/api*v1")},
		{"middle, no match", entries("midpath=/api/v2"), 0, nil},
		{"shared multiple", entries("multiroute=svcXXXepYYYrpc"), 50, entries("multiroute=svc*ep*rpc")},
		{"shared multiple, empty runs", entries("multiroute=svceprpc"), 50, entries("multiroute=svc*ep*rpc")},
		{"multiple, no match", entries("multiroute=svcABCrpc"), 0, nil},
		{"share_threshold over value_to_metric", entries("midroute=/api-beta-v2"), 80, entries("midroute=/api*v2")},
		{"nested middle", entries("tenant=t99prod", "resource=resBBBv2"), 60, entries("tenant=t*prod", "resource=res*v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.Match("test-domain", tt.req)
			if tt.want == nil {
				if r != nil {
					t.Fatalf("Match(%v) = %s, want none", tt.req, r.Path)
				}
				return
			}
			if r == nil {
				t.Fatalf("Match(%v) = nil", tt.req)
			}
			if got := r.KeyEntries(tt.req, nil); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("KeyEntries = %v, want %v", got, tt.want)
			}
			if r.Limits[0].RequestsPerUnit != tt.rpu {
				t.Errorf("requests_per_unit %d, want %d", r.Limits[0].RequestsPerUnit, tt.rpu)
			}
		})
	}
}
