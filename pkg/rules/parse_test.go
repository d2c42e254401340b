package rules

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// doc strips the leading newline of a raw string literal, so that line 1 of
// the YAML is the line after the opening backquote.
func doc(s string) []byte { return []byte(strings.TrimPrefix(s, "\n")) }

// errorLines splits a joined error into its sorted lines.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	lines := strings.Split(err.Error(), "\n")
	sort.Strings(lines)
	return lines
}

func mustParse(t *testing.T, yaml string, opts Options) *Domain {
	t.Helper()
	d, err := Parse("rules.yaml", doc(yaml), opts)
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return d
}

func ruleAt(t *testing.T, d *Domain, path string) *Rule {
	t.Helper()
	for _, r := range d.Rules() {
		if r.Path == path {
			return r
		}
	}
	var paths []string
	for _, r := range d.Rules() {
		paths = append(paths, r.Path)
	}
	t.Fatalf("no rule at %q; have %q", path, paths)
	return nil
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		opts Options
		want []string
	}{
		{
			name: "unknown unit",
			yaml: `
domain: edge
descriptors:
  - key: a
  - key: b
  - key: c
    rate_limit:
      unit: mins
      requests_per_unit: 5
`,
			want: []string{`rules.yaml:7: descriptors[2].rate_limit.unit: unknown unit "mins" (want second|minute|hour|day|week|month|year)`},
		},
		{
			name: "unknown fields at every level",
			yaml: `
domain: edge
domian: edge
descriptors:
  - key: a
    rate_limt: {}
    rate_limit:
      unit: second
      requests_per_unit: 1
      burts: 3
      replaces:
        - name: x
          nmae: y
`,
			want: []string{
				`rules.yaml:9: descriptors[0].rate_limit.burts: unknown field (want one of unit|requests_per_unit|unit_multiplier|algorithm|burst|sub_windows|unlimited|name|replaces|lease|warmup|on_limit|max_delay|cost)`,
				`rules.yaml:12: descriptors[0].rate_limit.replaces[0].nmae: unknown field (want one of name)`,
				`rules.yaml:2: domian: unknown field (want one of domain|descriptors)`,
				`rules.yaml:5: descriptors[0].rate_limt: unknown field (want one of key|value|rate_limit|rate_limits|descriptors|shadow_mode|quota_mode|detailed_metric|value_to_metric|share_threshold|hash_tag|metadata)`,
			},
		},
		{
			name: "missing and empty domain",
			yaml: `
descriptors: []
`,
			want: []string{`rules.yaml:1: domain: missing (want the domain name requests use)`},
		},
		{
			name: "empty domain",
			yaml: `
domain: ""
`,
			want: []string{`rules.yaml:1: domain: empty (want the domain name requests use)`},
		},
		{
			name: "unlimited with a limit",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      unit: second
      requests_per_unit: 10
`,
			want: []string{
				`rules.yaml:6: descriptors[0].rate_limit.unit: set together with unlimited: true (want either unlimited or a limit)`,
				`rules.yaml:7: descriptors[0].rate_limit.requests_per_unit: set together with unlimited: true (want either unlimited or a limit)`,
			},
		},
		{
			name: "sliding log above cap",
			opts: Options{SlidingLogCap: 100},
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 101
      algorithm: sliding_log
`,
			want: []string{`rules.yaml:6: descriptors[0].rate_limit.requests_per_unit: 101 is above the sliding_log cap of 100, the log keeps one entry per hit (want at most 100, or another algorithm)`},
		},
		{
			name: "sliding log default cap",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10001, algorithm: sliding_log}
`,
			want: []string{`rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: 10001 is above the sliding_log cap of 10000, the log keeps one entry per hit (want at most 10000, or another algorithm)`},
		},
		{
			name: "burst below one and burst without a bucket",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 0}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window, burst: 5}
`,
			want: []string{
				`rules.yaml:4: descriptors[0].rate_limit.burst: 0 is out of range (want an integer 1..4294967295)`,
				`rules.yaml:6: descriptors[1].rate_limit.burst: set for algorithm fixed_window (want burst only with token_bucket or gcra)`,
			},
		},
		{
			name: "sub_windows out of range and without a sliding window",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 0}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 61}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, sub_windows: 10}
  - key: d
    rate_limit: {unlimited: true, sub_windows: 10}
`,
			want: []string{
				`rules.yaml:4: descriptors[0].rate_limit.sub_windows: 0 is out of range (want an integer 1..60; 1 is the two-window estimate)`,
				`rules.yaml:6: descriptors[1].rate_limit.sub_windows: 61 is out of range (want an integer 1..60; 1 is the two-window estimate)`,
				`rules.yaml:8: descriptors[2].rate_limit.sub_windows: set for algorithm token_bucket (want sub_windows only with sliding_window)`,
				`rules.yaml:10: descriptors[3].rate_limit.sub_windows: set together with unlimited: true (want either unlimited or a limit)`,
			},
		},
		{
			name: "lease mode and algorithm",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, lease: sometimes}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window, lease: auto}
  - key: c
    rate_limit: {unlimited: true, lease: auto}
`,
			want: []string{
				`rules.yaml:4: descriptors[0].rate_limit.lease: unknown lease mode "sometimes" (want auto|off)`,
				`rules.yaml:6: descriptors[1].rate_limit.lease: auto for algorithm sliding_window, whose bound a lease cannot keep (want lease only with fixed_window, token_bucket or gcra)`,
				`rules.yaml:8: descriptors[2].rate_limit.lease: set together with unlimited: true (want either unlimited or a limit)`,
			},
		},
		{
			name: "duplicate descriptors",
			yaml: `
domain: d
descriptors:
  - key: a
    value: x
  - key: a
  - key: a
    value: x
  - key: a
    descriptors:
      - key: b
      - key: b
`,
			want: []string{
				`rules.yaml:11: descriptors[3].descriptors[1]: duplicate descriptor key "b" (first at line 10; want each key and value once per level)`,
				`rules.yaml:6: descriptors[2]: duplicate descriptor key "a" value "x" (first at line 3; want each key and value once per level)`,
				`rules.yaml:8: descriptors[3]: duplicate descriptor key "a" (first at line 5; want each key and value once per level)`,
			},
		},
		{
			name: "replaces naming itself",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: other
        - name: mine
        - name: ""
        - {}
`,
			want: []string{
				`rules.yaml:10: descriptors[0].rate_limit.replaces[1].name: replaces its own rate limit "mine" (want the name of another rate limit)`,
				`rules.yaml:11: descriptors[0].rate_limit.replaces[2].name: empty (want the name of another rate limit)`,
				`rules.yaml:12: descriptors[0].rate_limit.replaces[3].name: missing (want the name of another rate limit)`,
			},
		},
		{
			name: "replaces naming a sibling limit",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limits:
      - {name: fast, unit: second, requests_per_unit: 1}
      - {name: slow, unit: hour, requests_per_unit: 9, replaces: [{name: fast}]}
`,
			want: []string{`rules.yaml:6: descriptors[0].rate_limits[1].replaces[0].name: replaces its own rate limit "fast" (want the name of another rate limit)`},
		},
		{
			name: "rate_limit and rate_limits",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    rate_limits:
      - {unit: hour, requests_per_unit: 9}
`,
			want: []string{`rules.yaml:6: descriptors[0].rate_limits: set together with rate_limit (want one of them)`},
		},
		{
			name: "limits sharing a counter",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limits:
      - {unit: minute, requests_per_unit: 1}
      - {unit: second, unit_multiplier: 60, requests_per_unit: 2}
      - {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
`,
			want: []string{`rules.yaml:6: descriptors[0].rate_limits[1]: same algorithm (sliding_window) and period as descriptors[0].rate_limits[0], so both would count in one key (want a different algorithm or period, or one limit)`},
		},
		{
			name: "requests_per_unit out of range or not an integer",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: -1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 4294967296}
  - key: c
    rate_limit: {unit: second, requests_per_unit: "100"}
  - key: d
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: e
    rate_limit: {unit: second}
`,
			want: []string{
				`rules.yaml:10: descriptors[3].rate_limit.requests_per_unit: got 1.5 (want an integer 0..4294967295; 0 blocks every request)`,
				`rules.yaml:12: descriptors[4].rate_limit.requests_per_unit: missing (want an integer 0..4294967295; 0 blocks every request)`,
				`rules.yaml:4: descriptors[0].rate_limit.requests_per_unit: -1 is out of range (want an integer 0..4294967295; 0 blocks every request)`,
				`rules.yaml:6: descriptors[1].rate_limit.requests_per_unit: 4294967296 is out of range (want an integer 0..4294967295; 0 blocks every request)`,
				`rules.yaml:8: descriptors[2].rate_limit.requests_per_unit: got "100" (want an integer 0..4294967295; 0 blocks every request)`,
			},
		},
		{
			name: "missing key, missing unit, bad algorithm, bad multiplier",
			yaml: `
domain: d
descriptors:
  - value: x
  - key: ""
  - key: a
    rate_limit: {requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky_bucket}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}
  - key: e
    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 4294967295}
`,
			want: []string{
				`rules.yaml:10: descriptors[4].rate_limit.unit_multiplier: 0 is out of range (want an integer 1..4294967295)`,
				`rules.yaml:12: descriptors[5].rate_limit.unit_multiplier: 4294967295 years overflow the period (want at most 292471)`,
				`rules.yaml:3: descriptors[0].key: missing (want the descriptor entry key)`,
				`rules.yaml:4: descriptors[1].key: empty (want the descriptor entry key)`,
				`rules.yaml:6: descriptors[2].rate_limit.unit: missing (want second|minute|hour|day|week|month|year)`,
				`rules.yaml:8: descriptors[3].rate_limit.algorithm: unknown algorithm "leaky_bucket" (want fixed_window|sliding_window|sliding_log|token_bucket|gcra)`,
			},
		},
		{
			name: "rate_limits problems",
			yaml: `
domain: d
descriptors:
  - key: a
    rate_limits: []
  - key: b
    rate_limits:
      - unlimited: true
  - key: c
    rate_limit:
`,
			want: []string{
				`rules.yaml:4: descriptors[0].rate_limits: empty (want at least one rate limit)`,
				`rules.yaml:7: descriptors[1].rate_limits[0].unit: missing (want second|minute|hour|day|week|month|year)`,
				`rules.yaml:7: descriptors[1].rate_limits[0].requests_per_unit: missing (want an integer 0..4294967295; 0 blocks every request)`,
				`rules.yaml:7: descriptors[1].rate_limits[0].unlimited: not allowed in rate_limits (want rate_limit: {unlimited: true} instead of a list)`,
				`rules.yaml:9: descriptors[2].rate_limit: got null (want a mapping with unit and requests_per_unit, or unlimited: true)`,
			},
		},
		{
			name: "share_threshold without a wildcard",
			yaml: `
domain: d
descriptors:
  - key: a
    value: exact
    share_threshold: true
`,
			want: []string{`rules.yaml:5: descriptors[0].share_threshold: set on value "exact" (want a wildcard value, one with a "*")`},
		},
		{
			name: "hash_tag not on the path",
			yaml: `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        hash_tag: c
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: a
        hash_tag: a
        rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: []string{
				`rules.yaml:6: descriptors[0].descriptors[0].hash_tag: unknown key "c" (want the key of this descriptor or of an enclosing one: a|b)`,
				`rules.yaml:9: descriptors[0].descriptors[1].hash_tag: key "a" appears at levels 0 and 1 of this descriptor's path (want a key that appears once)`,
			},
		},
		{
			name: "wrong node kinds",
			yaml: `
domain: [x]
descriptors:
  key: a
`,
			want: []string{
				`rules.yaml:1: domain: got a list (want a string)`,
				`rules.yaml:3: descriptors: got a mapping (want a list of descriptors)`,
			},
		},
		{
			name: "wrong scalar kinds",
			yaml: `
domain: d
descriptors:
  - key: a
    shadow_mode: maybe
    descriptors:
      - 5
`,
			want: []string{
				`rules.yaml:4: descriptors[0].shadow_mode: got "maybe" (want true or false)`,
				`rules.yaml:6: descriptors[0].descriptors[0]: got 5 (want a descriptor mapping with key)`,
			},
		},
		{
			name: "duplicate field",
			yaml: `
domain: d
domain: e
`,
			want: []string{`rules.yaml:2: domain: duplicate field (first at line 1)`},
		},
		{
			name: "metadata that JSON cannot carry",
			yaml: `
domain: d
descriptors:
  - key: a
    metadata: {ratio: .nan, deep: {[a]: 1}}
    rate_limit: {unit: second, requests_per_unit: 1}
`,
			want: []string{
				`rules.yaml:4: descriptors[0].metadata.deep: got a list as a key (want a string)`,
				`rules.yaml:4: descriptors[0].metadata.ratio: got .nan (want a finite number)`,
			},
		},
		{
			name: "syntax error",
			yaml: `
domain: d
descriptors:
  - key: a
   value: b
`,
			// The decoder names line 2 (where the list's block starts, less
			// one); the failing line is 4 (the test trims the leading newline).
			want: []string{`rules.yaml:4: invalid YAML: did not find expected '-' indicator`},
		},
		{
			name: "indentation error on line 6",
			yaml: `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
     requests_per_unit: 5
`,
			want: []string{`rules.yaml:6: invalid YAML: did not find expected key`},
		},
		{
			name: "unclosed flow list runs to the end",
			yaml: `domain: d
descriptors: [
  {key: a, rate_limit: {unit: second, requests_per_unit: 1}},
`,
			want: []string{`rules.yaml:3: invalid YAML: did not find expected node content`},
		},
		{
			name: "several documents",
			yaml: `
domain: d
---
domain: e
`,
			want: []string{`rules.yaml:2: several YAML documents (want one domain per file)`},
		},
		{
			name: "empty file",
			yaml: "# only a comment\n",
			want: []string{`rules.yaml: empty file (want a mapping with domain and descriptors)`},
		},
		{
			name: "not a mapping",
			yaml: "- domain: d\n",
			want: []string{`rules.yaml:1: got a list (want a mapping with domain and descriptors)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse("rules.yaml", doc(tt.yaml), tt.opts)
			if err == nil {
				t.Fatalf("Parse succeeded with %d rules, want errors:\n%s", len(d.Rules()), strings.Join(tt.want, "\n"))
			}
			want := append([]string(nil), tt.want...)
			sort.Strings(want)
			if got := errorLines(err); !reflect.DeepEqual(got, want) {
				t.Errorf("errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "rules.yaml" {
				t.Errorf("errors.As(*Error) = %v, %+v; want an *Error for rules.yaml", errors.As(err, &e), e)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	d := mustParse(t, `
domain: shop
descriptors:
  - key: plain
    rate_limit:
      unit: MINUTE
      requests_per_unit: 100
  - key: bucket
    rate_limit: {unit: Second, requests_per_unit: 10, algorithm: TOKEN_BUCKET, lease: AUTO}
  - key: shaped
    rate_limit: {unit: hour, unit_multiplier: 6, requests_per_unit: 7, algorithm: gcra, burst: 3, lease: off}
  - key: open
    rate_limit: {unlimited: true, name: free}
  - key: many
    hash_tag: many
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 9}
      - {name: daily, unit: day, requests_per_unit: 500, replaces: [{name: plain_limit}]}
      - {unit: week, requests_per_unit: 2000, algorithm: fixed_window, lease: auto}
      - {unit: month, requests_per_unit: 0}
      - {unit: year, requests_per_unit: 4294967295}
  - key: two
    rate_limit: {unit: second, requests_per_unit: 3, sub_windows: 1}
  - key: ten
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window, sub_windows: 10}
  - key: aeon
    rate_limit: {unit: year, unit_multiplier: 35, requests_per_unit: 3}
`, Options{DefaultAlgorithm: algo.SlidingWindow})

	tests := []struct {
		path   string
		id     string
		limits []Limit
	}{
		{"shop.plain", "shop.plain", []Limit{{Label: "rate_limit", Unit: algo.UnitMinute, UnitMultiplier: 1, RequestsPerUnit: 100,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 100, Period: algo.Minute, SubWindows: algo.DefaultSubWindows}}}},
		{"shop.bucket", "shop.bucket", []Limit{{Label: "rate_limit", Unit: algo.UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 10,
			Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: algo.Second, Burst: 10}, Lease: true}}},
		{"shop.shaped", "shop.shaped", []Limit{{Label: "rate_limit", Unit: algo.UnitHour, UnitMultiplier: 6, RequestsPerUnit: 7,
			Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 7, Period: 6 * algo.Hour, Burst: 3}}}},
		{"shop.open", "free", nil},
		{"shop.many", "shop.many", []Limit{
			{Name: "burst", Label: "burst", Unit: algo.UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 5,
				Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 5, Period: algo.Second, Burst: 9}},
			{Name: "daily", Label: "daily", Unit: algo.UnitDay, UnitMultiplier: 1, RequestsPerUnit: 500,
				Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 500, Period: algo.Day, SubWindows: algo.DefaultSubWindows}},
			{Label: "rate_limits[2]", Unit: algo.UnitWeek, UnitMultiplier: 1, RequestsPerUnit: 2000,
				Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 2000, Period: algo.Week}, Lease: true},
			{Label: "rate_limits[3]", Unit: algo.UnitMonth, UnitMultiplier: 1, RequestsPerUnit: 0,
				Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 0, Period: algo.Month, SubWindows: algo.DefaultSubWindows}},
			{Label: "rate_limits[4]", Unit: algo.UnitYear, UnitMultiplier: 1, RequestsPerUnit: 4294967295,
				Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 4294967295, Period: algo.Year, SubWindows: algo.DefaultSubWindows}},
		}},
		{"shop.two", "shop.two", []Limit{{Label: "rate_limit", Unit: algo.UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 3,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 3, Period: algo.Second, SubWindows: 1}}}},
		{"shop.ten", "shop.ten", []Limit{{Label: "rate_limit", Unit: algo.UnitSecond, UnitMultiplier: 1, RequestsPerUnit: 3,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 3, Period: algo.Second, SubWindows: 10}}}},
		// 35 years × 30 sub-windows would not be exact in Lua: the
		// default gives way to what fits.
		{"shop.aeon", "shop.aeon", []Limit{{Label: "rate_limit", Unit: algo.UnitYear, UnitMultiplier: 35, RequestsPerUnit: 3,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 3, Period: 35 * algo.Year, SubWindows: 8}}}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := ruleAt(t, d, tt.path)
			if r.ID != tt.id {
				t.Errorf("ID = %q, want %q", r.ID, tt.id)
			}
			if !reflect.DeepEqual(r.Limits, tt.limits) {
				t.Errorf("Limits =\n%+v\nwant\n%+v", r.Limits, tt.limits)
			}
			if r.Unlimited != (tt.limits == nil) {
				t.Errorf("Unlimited = %v, want %v", r.Unlimited, tt.limits == nil)
			}
		})
	}
	many := ruleAt(t, d, "shop.many")
	if many.HashTag != 0 || !reflect.DeepEqual(many.Replaces, []string{"plain_limit"}) {
		t.Errorf("many: HashTag = %d, Replaces = %q; want 0, [plain_limit]", many.HashTag, many.Replaces)
	}
	if ruleAt(t, d, "shop.plain").HashTag != -1 {
		t.Errorf("plain: HashTag = %d, want -1", ruleAt(t, d, "shop.plain").HashTag)
	}
}

func TestParseDefaultAlgorithm(t *testing.T) {
	const y = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3}
`
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			r := ruleAt(t, mustParse(t, y, Options{DefaultAlgorithm: a}), "d.a")
			if got := r.Limits[0].Policy.Algorithm; got != a {
				t.Errorf("algorithm = %v, want the default %v", got, a)
			}
		})
	}
}

// The flags and free-form fields of envoyproxy/ratelimit keep their meaning,
// and scalars are read the way its YAML library reads them.
func TestParseCompatibility(t *testing.T) {
	d := mustParse(t, `
domain: compat
descriptors:
  - key: number
    value: 500
    shadow_mode: yes
    detailed_metric: true
    rate_limit: &base
      unit: second
      requests_per_unit: 10
  - key: again
    rate_limit: *base
  - key: flags
    value: x*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: leaf
        quota_mode: true
        metadata:
          service: payments
          weight: 3
          ratio: 0.5
          on: true
          none: ~
          tags: [a, 1]
          nested: {k: v}
        rate_limit:
          <<: *base
          requests_per_unit: 20
          name: leaf
  - key: empty_value
    value: ""
    rate_limit: {unit: day, requests_per_unit: 1}
`, Options{})
	if d.Name != "compat" || d.File != "rules.yaml" || d.Line != 1 {
		t.Errorf("domain = %q %q:%d, want compat rules.yaml:1", d.Name, d.File, d.Line)
	}
	num := ruleAt(t, d, "compat.number_500")
	if !num.ShadowMode || !num.DetailedMetric || num.Limits[0].RequestsPerUnit != 10 || num.Line != 3 {
		t.Errorf("number_500 = %+v, want shadow, detailed, 10/s at line 3", num)
	}
	if again := ruleAt(t, d, "compat.again"); !reflect.DeepEqual(again.Limits, num.Limits) {
		t.Errorf("aliased limits = %+v, want %+v", again.Limits, num.Limits)
	}
	leaf := ruleAt(t, d, "compat.flags_x*.leaf")
	if leaf.ID != "leaf" || !leaf.QuotaMode || !leaf.ValueToMetric || !leaf.ShareThreshold || leaf.Limits[0].RequestsPerUnit != 20 ||
		leaf.Limits[0].Unit != algo.UnitSecond {
		t.Errorf("leaf = %+v, want quota, value_to_metric, share_threshold and the merged 20/s", leaf)
	}
	wantMeta := map[string]any{
		"service": "payments", "weight": int64(3), "ratio": 0.5, "on": true, "none": nil,
		"tags": []any{"a", int64(1)}, "nested": map[string]any{"k": "v"},
	}
	if !reflect.DeepEqual(leaf.Metadata, wantMeta) {
		t.Errorf("metadata = %#v\nwant %#v", leaf.Metadata, wantMeta)
	}
	// An empty value is the key alone.
	ruleAt(t, d, "compat.empty_value")
}

// envoyproxy/ratelimit's README examples are parsed, and their documented
// request/response sequences replayed, by pkg/rls's compat_test.go; they
// are not repeated here.

// An alias-heavy file cannot make the parser build an exponential tree.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: x0\n    descriptors: &a0 [{key: k}]\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, "  - key: x%d\n    descriptors: &a%d [", i, i)
		for j := 0; j < 8; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{key: k%d, descriptors: *a%d}", j, i-1)
		}
		b.WriteString("]\n")
	}
	_, err := Parse("bomb.yaml", []byte(b.String()), Options{})
	if err == nil || !strings.Contains(err.Error(), "more than 200000 YAML nodes") {
		t.Fatalf("Parse = %v, want the node budget error", err)
	}
}

// A self-referencing alias ends at the nesting bound instead of recursing.
func TestParseRecursiveAlias(t *testing.T) {
	_, err := Parse("loop.yaml", []byte("domain: d\ndescriptors: &x [{key: a, descriptors: *x}]\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), "descriptors nested deeper than 32 levels (want fewer levels)") {
		t.Fatalf("Parse = %v, want the nesting bound error", err)
	}
}
