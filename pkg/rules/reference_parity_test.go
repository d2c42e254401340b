package rules

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// This file holds envoy-rls to envoyproxy/ratelimit's own config test cases
// (its test/config/config_test.go and the YAML files beside it, restated as
// testdata/reference/*.yaml): a file set the reference loads must load here,
// one it refuses must be refused here, and every lookup the reference test
// asserts must find the same limit. Where envoy-rls differs on purpose the
// row says so in differs, and docs/comparison.md
// or docs/migrating.md says so to users.

// parityLimit is what a lookup must find; nil means no limit (the
// reference's GetLimit returning nil).
type parityLimit struct {
	rpu       uint32
	unit      algo.Unit
	mult      uint32 // 0 means 1
	name      string
	shadow    bool
	unlimited bool
	// key, when set, is the entries' values after share_threshold replaced
	// the ones its wildcards matched ("files/*"), joined with "|": what
	// the reference's ShareThresholdKeyPattern says.
	key string
	// replaces lists the names this rule's limit replaces.
	replaces []string
	// metadata, when set, is the descriptor's metadata.
	metadata map[string]any
}

type parityLookup struct {
	entries []algo.Entry
	want    *parityLimit
	// sameAs, when set, is the index of an earlier lookup of this row whose
	// rule must be the very same one (the reference's assert.Equal of two
	// GetLimit results: one limit, one counter).
	sameAs int
}

func same(i int) int { return i + 1 } // sameAs is 1-based so 0 means unset

func TestReferenceParity(t *testing.T) {
	lim := func(rpu uint32, unit algo.Unit) *parityLimit { return &parityLimit{rpu: rpu, unit: unit} }
	with := func(l *parityLimit, f func(*parityLimit)) *parityLimit { f(l); return l }
	shared := func(rpu uint32, key string) *parityLimit {
		return &parityLimit{rpu: rpu, unit: algo.UnitMinute, key: key}
	}

	tests := []struct {
		ref     string   // the reference test that asserts this
		files   []string // in testdata/reference, loaded together
		merge   bool     // MERGE_DOMAIN_CONFIG=true (Options.MergeDomains)
		refuse  string   // when set, the files are refused with an error containing it
		differs string   // when set, the reason envoy-rls deliberately differs here
		lookups []parityLookup
	}{
		{
			ref:   "TestBasicConfig",
			files: []string{"basic_config.yaml"},
			lookups: []parityLookup{
				{entries: nil},
				{entries: entries("key1=something")},
				{entries: entries("key1=value1")},
				{entries: entries("key2=value2", "subkey=subvalue")},
				{entries: entries("key5=value5", "subkey5=subvalue")},
				{entries: entries("key1=value1", "subkey1=something"), want: lim(5, algo.UnitSecond)},
				{entries: entries("key1=value1", "subkey1=subvalue1"), want: lim(10, algo.UnitSecond)},
				{entries: entries("key2=something"), want: lim(20, algo.UnitMinute)},
				{entries: entries("key2=value2"), want: lim(30, algo.UnitMinute)},
				{entries: entries("key2=value3")},
				{entries: entries("key3=foo"), want: lim(1, algo.UnitHour)},
				{entries: entries("key4=foo"), want: with(lim(1, algo.UnitDay), func(l *parityLimit) { l.name = "key4_rate_limit" })},
				{entries: entries("key6=foo"), want: &parityLimit{unlimited: true}},
				{entries: entries("key7=unspecified_value"), want: lim(70, algo.UnitMinute)},
				{entries: entries("key7=another_value"), want: lim(70, algo.UnitMinute), sameAs: same(13)},
				{entries: entries("key5=value5", "subkey5=subvalue5"), want: lim(25, algo.UnitDay)},
			},
		},
		{
			ref:    "TestDuplicateDomain",
			files:  []string{"basic_config.yaml", "duplicate_domain.yaml"},
			refuse: `duplicate domain "test-domain"`,
		},
		{ref: "TestEmptyDomain", files: []string{"empty_domain.yaml"}, refuse: "domain: empty"},
		{ref: "TestEmptyKey", files: []string{"empty_key.yaml"}, refuse: "descriptors[0].key: empty"},
		{ref: "TestDuplicateKey", files: []string{"duplicate_key.yaml"}, refuse: `duplicate descriptor key "key1" value "value1"`},
		{
			// The reference merges a domain's files only with
			// MERGE_DOMAIN_CONFIG=true (our --merge-domain-config); by
			// default both refuse them, as TestDuplicateDomain shows.
			ref:    "TestDomainMerge, merging off",
			files:  []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"},
			refuse: `duplicate domain "test-domain"`,
		},
		{
			ref:   "TestDomainMerge",
			files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"},
			merge: true,
			lookups: []parityLookup{
				{entries: nil},
				{entries: entries("key1=value1"), want: lim(10, algo.UnitMinute)},
				{entries: entries("key2=value2"), want: lim(20, algo.UnitMinute)},
			},
		},
		{
			ref:    "TestDuplicateKeyDomainMerge",
			files:  []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"},
			merge:  true,
			refuse: `duplicate descriptor key "key1" value "value1" in domain "test-domain"`,
		},
		{ref: "TestBadLimitUnit", files: []string{"bad_limit_unit.yaml"}, refuse: `unknown unit "foo"`},
		{ref: "TestReplacesSelf", files: []string{"replaces_self.yaml"}, refuse: "replaces its own rate limit"},
		{ref: "TestReplacesEmpty", files: []string{"replaces_empty.yaml"}, refuse: "replaces[0].name: empty"},
		{ref: "TestBadYaml", files: []string{"bad_yaml.yaml"}, refuse: "bad_yaml.yaml:2: invalid YAML"},
		{ref: "TestMisspelledKey", files: []string{"misspelled_key.yaml"}, refuse: ".ratelimit: unknown field"},
		{ref: "TestMisspelledKey", files: []string{"misspelled_key2.yaml"}, refuse: ".requestsperunit: unknown field"},
		{ref: "TestNonStringKey", files: []string{"non_string_key.yaml"}, refuse: "0.25: unknown field"},
		{ref: "TestNonMapList", files: []string{"non_map_list.yaml"}, refuse: `descriptors[0]: got "x"`},
		{ref: "TestUnlimitedWithRateLimitUnit", files: []string{"unlimited_with_unit.yaml"}, refuse: "set together with unlimited"},
		{
			ref:   "TestShadowModeConfig",
			files: []string{"shadowmode_config.yaml"},
			lookups: []parityLookup{
				{entries: entries("key1=value1", "subkey1=something"), want: lim(5, algo.UnitSecond)},
				{entries: entries("key1=value1", "subkey1=subvalue1"), want: with(lim(10, algo.UnitSecond), func(l *parityLimit) { l.shadow = true })},
				{entries: entries("key2=something"), want: with(lim(20, algo.UnitMinute), func(l *parityLimit) { l.shadow = true })},
				{entries: entries("key2=value2"), want: lim(30, algo.UnitMinute)},
			},
		},
		{
			ref:   "TestWildcardConfig",
			files: []string{"wildcard.yaml"},
			lookups: []parityLookup{
				// A key without a value matches every value, with one limit.
				{entries: entries("noVal=foo1"), want: lim(20, algo.UnitMinute)},
				{entries: entries("noVal=foo2"), want: lim(20, algo.UnitMinute), sameAs: same(0)},
				// One wildcard, many values, one limit.
				{entries: entries("wild=foo1"), want: lim(20, algo.UnitMinute)},
				{entries: entries("wild=foo2"), want: lim(20, algo.UnitMinute), sameAs: same(2)},
				{entries: entries("nestedWild=val1", "wild=goo2"), want: lim(20, algo.UnitMinute)},
				{entries: entries("wild=bar")},
				// An exact value is no prefix.
				{entries: entries("noWild=foo1")},
				{entries: entries("midWildcard=barab")},
				// Not in the reference's test: its wildcards match in any
				// position since share_threshold's "/api*v1" (see
				// TestShareThreshold's midpath below), and so do ours.
				{entries: entries("midWild=barab"), want: lim(20, algo.UnitMinute)},
				{entries: entries("midWild=bara")},
			},
		},
		{
			ref:   "TestShareThreshold",
			files: []string{"share_threshold.yaml"},
			lookups: []parityLookup{
				// Basic: every value under files/* is one counter.
				{entries: entries("files=files/a.pdf"), want: shared(100, "files/*")},
				{entries: entries("files=files/b.csv"), want: shared(100, "files/*"), sameAs: same(0)},
				{entries: entries("files=files/c.txt"), want: shared(100, "files/*"), sameAs: same(0)},
				// With value_to_metric and detailed_metric.
				{entries: entries("route=api/v1", "method=GET"), want: shared(60, "api/*|GET")},
				{entries: entries("service=svc/user", "endpoint=get"), want: shared(80, "svc/*|get")},
				// Nested.
				{entries: entries("nested=parent", "files=nested/file1.txt"), want: shared(200, "parent|nested/*")},
				{entries: entries("files=top/file1.txt", "files=nested/file1.txt"), want: shared(300, "top/*|nested/*")},
				// The parent shares, the child (share_threshold: false) does not.
				{entries: entries("path=path/foo", "file=file/doc1", "type=pdf"), want: shared(120, "path/*|file/doc1|pdf")},
				{entries: entries("user=user/alice", "resource=res/file1", "action=read"), want: shared(150, "user/*|res/*|read")},
				// An exact value wins over the wildcard and keeps its own counter.
				{entries: entries("file=test1"), want: shared(50, "test1")},
				{entries: entries("file=test2"), want: shared(100, "test*")},
				{entries: entries("file=test23"), want: shared(100, "test*"), sameAs: same(10)},
				{entries: entries("file=test123"), want: shared(100, "test*"), sameAs: same(10)},
				// Wildcards inside the value.
				{entries: entries("midpath=/api/xv1"), want: shared(100, "/api*v1")},
				{entries: entries("multiroute=svc-a-ep-b-rpc"), want: shared(50, "svc*ep*rpc")},
				{entries: entries("tenant=t1prod", "resource=resAv2"), want: shared(60, "t*prod|res*v2")},
			},
		},
		{
			ref:   "TestUnitMultiplier",
			files: []string{"unit_multiplier.yaml"},
			lookups: []parityLookup{
				{entries: entries("key1="), want: with(lim(20, algo.UnitMinute), func(l *parityLimit) { l.mult = 5 })},
				{entries: entries("key2="), want: lim(25, algo.UnitMinute)},
			},
		},
		{ref: "TestZeroUnitMultiplier", files: []string{"zero_unit_multiplier.yaml"}, refuse: "unit_multiplier: 0 is out of range"},
		{
			ref:   "metadata.yaml (test/service: descriptor metadata in the response)",
			files: []string{"metadata.yaml"},
			lookups: []parityLookup{
				{entries: entries("key1=value1", "subkey1=x"), want: with(lim(5, algo.UnitSecond), func(l *parityLimit) {
					l.metadata = map[string]any{"name": "service_1"}
				})},
				{entries: entries("key2=x"), want: with(lim(20, algo.UnitMinute), func(l *parityLimit) {
					l.metadata = map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}
				})},
			},
		},
		{
			ref:   "README replaces example (test/service: TestServiceWithReplaces...)",
			files: []string{"replaces.yaml"},
			lookups: []parityLookup{
				{entries: entries("key1=other"), want: with(lim(10, algo.UnitMinute), func(l *parityLimit) { l.name = "generic" })},
				{entries: entries("key1=value1"), want: with(lim(100, algo.UnitMinute), func(l *parityLimit) {
					l.name = "specific"
					l.replaces = []string{"generic"}
				})},
			},
		},
		{
			// The reference looks a descriptor up by the string
			// key + "_" + value, so its GetLimit also gives entry a_b=c
			// the limit of a=b_c. envoy-rls compares key and value as a
			// pair: a=b_c matches, a_b=c does not.
			ref:     "GetLimit's key_value lookup (config_impl.go; no reference test)",
			files:   []string{"underscore_join.yaml"},
			differs: "key and value compared as a pair, not joined with _ (docs/comparison.md)",
			lookups: []parityLookup{
				{entries: entries("a=b_c"), want: lim(7, algo.UnitMinute)},
				{entries: entries("a_b=c")},
			},
		},
	}

	for _, tc := range tests {
		t.Run(tc.ref+"/"+strings.Join(tc.files, "+"), func(t *testing.T) {
			if tc.differs != "" {
				t.Logf("documented difference: %s", tc.differs)
			}
			snap, err := loadReference(t, tc.files, Options{MergeDomains: tc.merge})
			if tc.refuse != "" {
				if err == nil {
					t.Fatalf("loaded; the reference refuses it (want an error containing %q)", tc.refuse)
				}
				if !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("error %q does not contain %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused; the reference loads it: %v", err)
			}
			got := make([]*Rule, len(tc.lookups))
			for i, l := range tc.lookups {
				got[i] = snap.Match("test-domain", l.entries)
				checkParityLookup(t, l, got[i])
				if l.sameAs > 0 && got[i] != got[l.sameAs-1] {
					t.Errorf("%v: matched %v, want the same rule as %v (%v)", l.entries, ruleID(got[i]),
						tc.lookups[l.sameAs-1].entries, ruleID(got[l.sameAs-1]))
				}
			}
		})
	}
}

// loadReference loads files from testdata/reference into one snapshot, as
// LoadDir loads a config directory that holds them.
func loadReference(t *testing.T, files []string, opts Options) (*Snapshot, error) {
	t.Helper()
	var rfs []ruleFile
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("testdata", "reference", f))
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		rfs = append(rfs, ruleFile{path: f, data: data})
	}
	return build(rfs, nil, opts)
}

func checkParityLookup(t *testing.T, l parityLookup, r *Rule) {
	t.Helper()
	if l.want == nil {
		if r != nil {
			t.Errorf("%v: matched %s; the reference finds no limit", l.entries, r.ID)
		}
		return
	}
	if r == nil {
		t.Errorf("%v: no limit; the reference finds one", l.entries)
		return
	}
	w := l.want
	if r.Unlimited != w.unlimited || r.ShadowMode != w.shadow {
		t.Errorf("%v: unlimited %v shadow %v, want %v %v", l.entries, r.Unlimited, r.ShadowMode, w.unlimited, w.shadow)
	}
	if !reflect.DeepEqual(r.Replaces, w.replaces) {
		t.Errorf("%v: replaces %q, want %q", l.entries, r.Replaces, w.replaces)
	}
	if w.metadata != nil && !reflect.DeepEqual(r.Metadata, w.metadata) {
		t.Errorf("%v: metadata %v, want %v", l.entries, r.Metadata, w.metadata)
	}
	if w.key != "" {
		var vals []string
		for _, e := range r.KeyEntries(l.entries, nil) {
			vals = append(vals, e.Value)
		}
		if got := strings.Join(vals, "|"); got != w.key {
			t.Errorf("%v: counter values %q, want %q", l.entries, got, w.key)
		}
		if want := strings.Contains(w.key, "*"); r.ShareThreshold != want {
			t.Errorf("%v: ShareThreshold %v, want %v", l.entries, r.ShareThreshold, want)
		}
	}
	if w.unlimited {
		if len(r.Limits) != 0 {
			t.Errorf("%v: unlimited rule has %d limits", l.entries, len(r.Limits))
		}
		return
	}
	if len(r.Limits) != 1 {
		t.Fatalf("%v: %d limits, want 1", l.entries, len(r.Limits))
	}
	got := r.Limits[0]
	mult := w.mult
	if mult == 0 {
		mult = 1
	}
	if got.RequestsPerUnit != w.rpu || got.Unit != w.unit || got.UnitMultiplier != mult || got.Name != w.name {
		t.Errorf("%v: limit %d per %d×%v name %q, want %d per %d×%v name %q", l.entries,
			got.RequestsPerUnit, got.UnitMultiplier, got.Unit, got.Name, w.rpu, mult, w.unit, w.name)
	}
}

func ruleID(r *Rule) string {
	if r == nil {
		return "no rule"
	}
	return r.ID
}
