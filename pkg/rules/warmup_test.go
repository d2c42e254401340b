package rules

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseWarmup: a warmup block on rate_limit and on each entry of
// rate_limits parses into Limit.Warmup; every bad field is refused with
// its path and what would be accepted.
func TestParseWarmup(t *testing.T) {
	sale := time.Date(2026, 12, 24, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		block string // the rate limit's fields after unit and requests_per_unit
		want  *Warmup
		errs  []string
	}{
		{name: "none", block: ``, want: nil},
		{name: "full", block: `, warmup: {period: 10m, from: 0.33, start: "2026-12-24T10:00:00Z"}`,
			want: &Warmup{Period: 10 * time.Minute, From: 0.33, Start: sale}},
		{name: "unquoted start and integer from", block: `, warmup: {period: 1h, from: 1, start: 2026-12-24T11:00:00+01:00}`,
			want: &Warmup{Period: time.Hour, From: 1, Start: sale}},
		{name: "default from", block: `, warmup: {period: 4s}`, want: &Warmup{Period: 4 * time.Second, From: DefaultWarmupFrom}},
		{name: "missing period", block: `, warmup: {from: 0.5}`,
			errs: []string{"rules.yaml:3: descriptors[0].rate_limit.warmup.period: missing (want a duration such as 10m, at most 168h0m0s)"}},
		{name: "bad values", block: `, warmup: {period: 10, from: 0, start: "24 Dec"}`, errs: []string{
			`rules.yaml:3: descriptors[0].rate_limit.warmup.from: 0 is out of range (want a fraction of the limit above 0 and at most 1, such as 0.33)`,
			`rules.yaml:3: descriptors[0].rate_limit.warmup.period: "10" is not a duration (want a duration such as 10m, above 0 and at most 168h0m0s)`,
			`rules.yaml:3: descriptors[0].rate_limit.warmup.start: "24 Dec" is not a time (want an RFC 3339 time such as "2026-12-24T10:00:00Z")`,
		}},
		{name: "out of range", block: `, warmup: {period: 200h, from: 1.5}`, errs: []string{
			`rules.yaml:3: descriptors[0].rate_limit.warmup.from: 1.5 is out of range (want a fraction of the limit above 0 and at most 1, such as 0.33)`,
			`rules.yaml:3: descriptors[0].rate_limit.warmup.period: 200h0m0s is out of range (want a duration such as 10m, above 0 and at most 168h0m0s)`,
		}},
		{name: "negative period and text from", block: `, warmup: {period: -1s, from: half}`, errs: []string{
			`rules.yaml:3: descriptors[0].rate_limit.warmup.from: got "half" (want a fraction of the limit above 0 and at most 1, such as 0.33)`,
			`rules.yaml:3: descriptors[0].rate_limit.warmup.period: -1s is out of range (want a duration such as 10m, above 0 and at most 168h0m0s)`,
		}},
		{name: "not a mapping", block: `, warmup: 10m`,
			errs: []string{`rules.yaml:3: descriptors[0].rate_limit.warmup: got "10m" (want a mapping with period, and optionally from and start)`}},
		{name: "unknown field", block: `, warmup: {period: 1m, form: 0.5}`,
			errs: []string{`rules.yaml:3: descriptors[0].rate_limit.warmup.form: unknown field (want one of period|from|start)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 8" + tt.block + "}}\n"
			d, err := Parse("rules.yaml", []byte(y), Options{})
			if tt.errs != nil {
				if got := errorLines(err); !reflect.DeepEqual(got, tt.errs) {
					t.Fatalf("errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(tt.errs, "\n      "))
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := d.Rules()[0].Limits[0].Warmup
			if got != nil {
				if len(got.Anchor) != 32 {
					t.Errorf("Anchor %q, want 32 hex digits", got.Anchor)
				}
				got.Anchor = "" // TestWarmupAnchor checks it
				if tt.want != nil && got.Start.Equal(tt.want.Start) {
					got.Start = tt.want.Start // same instant, another zone
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Warmup = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseWarmupPlaces: warmup goes on each entry of rate_limits, and
// never with unlimited.
func TestParseWarmupPlaces(t *testing.T) {
	d := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n"+
		"      - {unit: second, requests_per_unit: 8, warmup: {period: 1m}}\n      - {unit: day, requests_per_unit: 80}\n", Options{})
	ls := d.Rules()[0].Limits
	if ls[0].Warmup == nil || ls[0].Warmup.Period != time.Minute || ls[1].Warmup != nil {
		t.Errorf("warmups %+v, %+v; want a 1m ramp on the first limit only", ls[0].Warmup, ls[1].Warmup)
	}
	_, err := Parse("rules.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true, warmup: {period: 1m}}}\n"), Options{})
	want := "rules.yaml:3: descriptors[0].rate_limit.warmup: set together with unlimited: true (want either unlimited or a limit)"
	if err == nil || err.Error() != want {
		t.Errorf("unlimited with warmup: %v, want %s", err, want)
	}
}

// TestDumpWarmup: /debug/config's dump shows the warmup block and, with an
// EffectiveLimit, each limit's value in force.
func TestDumpWarmup(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"d.yaml": `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 8, warmup: {period: 4s, from: 0.25, start: "2026-12-24T10:00:00Z"}}
`})
	eff := func(domain string, r *Rule, l *Limit) uint32 { return l.RequestsPerUnit / 4 }
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"as configured", s, `"burst":0,`},
		{"effective", s.Dump(eff), `"effective_requests_per_unit":2,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			const block = `"warmup":{"period":"4s","from":0.25,"start":"2026-12-24T10:00:00Z"}`
			if !strings.Contains(string(raw), block) {
				t.Errorf("dump %s lacks %s", raw, block)
			}
			hasEff := strings.Contains(string(raw), "effective_requests_per_unit")
			if hasEff != strings.Contains(tt.want, "effective") {
				t.Errorf("dump %s: effective_requests_per_unit shown = %v", raw, hasEff)
			}
			if hasEff && !strings.Contains(string(raw), tt.want) {
				t.Errorf("dump %s lacks %s", raw, tt.want)
			}
		})
	}
}

// TestWarmupAnchor: the anchor ID stays when only the file around the
// limit changes (a reload of the same limit keeps its ramp) and changes
// with the limit, its place or the ramp (which then starts again).
func TestWarmupAnchor(t *testing.T) {
	const base = "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 8, warmup: {period: 4s}}}\n"
	anchor := func(y string) string {
		t.Helper()
		return mustParse(t, y, Options{}).Rules()[0].Limits[0].Warmup.Anchor
	}
	want := anchor(base)
	tests := []struct {
		name string
		yaml string
		same bool
	}{
		{"other rule added", base + "  - {key: j, rate_limit: {unit: second, requests_per_unit: 1}}\n", true},
		{"moved down", "# comment\n" + base, true},
		{"limit raised", strings.Replace(base, "8,", "9,", 1), false},
		{"algorithm named", strings.Replace(base, "8,", "8, algorithm: gcra,", 1), false},
		{"ramp longer", strings.Replace(base, "4s", "5s", 1), false},
		{"another descriptor", strings.Replace(base, "key: k", "key: k, value: v", 1), false},
		{"another domain", strings.Replace(base, "domain: d", "domain: e", 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := anchor(tt.yaml); (got == want) != tt.same {
				t.Errorf("anchor %s vs %s: same = %v, want %v", got, want, got == want, tt.same)
			}
		})
	}
}
