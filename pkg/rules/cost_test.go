package rules

import (
	"slices"
	"testing"
)

// TestCost: `cost: charge | request` on a limit, the default that
// Options.DefaultCharge sets, and what a charge cannot be combined with.
func TestCost(t *testing.T) {
	tests := []struct {
		name   string
		limit  string
		opts   Options
		charge bool
		want   string // an error line, or "" when the limit parses
	}{
		{name: "default", limit: "{unit: second, requests_per_unit: 10}"},
		{name: "charge", limit: "{unit: second, requests_per_unit: 10, cost: charge}", charge: true},
		{name: "request", limit: "{unit: second, requests_per_unit: 10, cost: request}"},
		{name: "default charge", limit: "{unit: second, requests_per_unit: 10}", opts: Options{DefaultCharge: true}, charge: true},
		{name: "request wins over the default", limit: "{unit: second, requests_per_unit: 10, cost: request}", opts: Options{DefaultCharge: true}},
		{name: "default charge skips a lease", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, lease: auto}", opts: Options{DefaultCharge: true}},
		{name: "default charge skips queue mode", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 100ms}", opts: Options{DefaultCharge: true}},
		{name: "unknown", limit: "{unit: second, requests_per_unit: 10, cost: tokens}",
			want: `rules.yaml:4: descriptors[0].rate_limit.cost: unknown cost "tokens" (want request|charge)`},
		{name: "not a string", limit: "{unit: second, requests_per_unit: 10, cost: [charge]}",
			want: `rules.yaml:4: descriptors[0].rate_limit.cost: got a list (want a string)`},
		{name: "charge with a lease", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, lease: auto, cost: charge}",
			want: "rules.yaml:4: descriptors[0].rate_limit.cost: charge with lease: auto: a lease cannot count hits past the limit (want one of them)"},
		{name: "charge in queue mode", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 100ms, cost: charge}",
			want: "rules.yaml:4: descriptors[0].rate_limit.cost: charge with on_limit: delay: a charge is counted at once, it never waits (want one of them)"},
		{name: "unlimited", limit: "{unlimited: true, cost: charge}",
			want: "rules.yaml:4: descriptors[0].rate_limit.cost: set together with unlimited: true (want either unlimited or a limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("rules.yaml", doc("\ndomain: api\ndescriptors:\n  - key: user\n    rate_limit: "+tt.limit+"\n"), tt.opts)
			if tt.want != "" {
				if got := errorLines(err); !slices.Contains(got, tt.want) {
					t.Errorf("errors:\n%v\nwant among them:\n%s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rs := set.Rules()
			if len(rs) != 1 || len(rs[0].Limits) != 1 || rs[0].Limits[0].Charge != tt.charge {
				t.Fatalf("rules %+v, want one limit with charge %v", rs, tt.charge)
			}
		})
	}
}
