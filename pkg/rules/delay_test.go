package rules

import (
	"slices"
	"testing"
	"time"
)

func TestOnLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit string
		opts  Options
		want  time.Duration
	}{
		{name: "default deny", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra}"},
		{name: "explicit deny", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: deny}"},
		{name: "delay gcra", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 500ms}", want: 500 * time.Millisecond},
		{name: "delay token_bucket at the ceiling", limit: "{unit: second, requests_per_unit: 10, algorithm: token_bucket, on_limit: Delay, max_delay: 1s}", want: time.Second},
		{name: "raised ceiling", limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 3s}", opts: Options{MaxDelay: 5 * time.Second}, want: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustParse(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: "+tt.limit+"\n", tt.opts)
			if got := ruleAt(t, d, "api.user").Limits[0].MaxDelay; got != tt.want {
				t.Errorf("MaxDelay %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOnLimitErrors(t *testing.T) {
	tests := []struct {
		name  string
		limit string
		opts  Options
		want  string
	}{
		{
			name:  "window algorithm",
			limit: "{unit: second, requests_per_unit: 10, algorithm: fixed_window, on_limit: delay, max_delay: 100ms}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.on_limit: delay for algorithm fixed_window: a window cannot reserve a hit for a later time without losing its current count (want delay only with token_bucket or gcra)",
		},
		{
			name:  "above the ceiling",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 2s}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.max_delay: 2s is out of range (want a duration such as 500ms, above 0 and at most the server's --max-delay 1s)",
		},
		{
			name:  "above a lowered ceiling",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: 300ms}",
			opts:  Options{MaxDelay: 200 * time.Millisecond},
			want:  "rules.yaml:4: descriptors[0].rate_limit.max_delay: 300ms is out of range (want a duration such as 500ms, above 0 and at most the server's --max-delay 200ms)",
		},
		{
			name:  "missing max_delay",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.max_delay: missing with on_limit: delay (want a duration such as 500ms, at most 1s)",
		},
		{
			name:  "max_delay without delay",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, max_delay: 100ms}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.max_delay: set without on_limit: delay (want on_limit: delay, or no max_delay)",
		},
		{
			name:  "unknown mode",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: queue}",
			want:  `rules.yaml:4: descriptors[0].rate_limit.on_limit: unknown mode "queue" (want deny|delay)`,
		},
		{
			name:  "not a duration",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, on_limit: delay, max_delay: soon}",
			want:  `rules.yaml:4: descriptors[0].rate_limit.max_delay: "soon" is not a duration (want a duration such as 500ms, above 0 and at most the server's --max-delay 1s)`,
		},
		{
			name:  "with a lease",
			limit: "{unit: second, requests_per_unit: 10, algorithm: gcra, lease: auto, on_limit: delay, max_delay: 100ms}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.on_limit: delay with lease: auto: a replica answering from its lease cannot queue (want one of them)",
		},
		{
			name:  "unlimited",
			limit: "{unlimited: true, on_limit: delay}",
			want:  "rules.yaml:4: descriptors[0].rate_limit.on_limit: set together with unlimited: true (want either unlimited or a limit)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", doc("\ndomain: api\ndescriptors:\n  - key: user\n    rate_limit: "+tt.limit+"\n"), tt.opts)
			if got := errorLines(err); !slices.Contains(got, tt.want) {
				t.Errorf("errors:\n%v\nwant among them:\n%s", err, tt.want)
			}
		})
	}
}
