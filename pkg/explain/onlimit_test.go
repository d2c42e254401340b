package explain

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestExplainShowsOnLimit: each limit reports what a request over it gets,
// in the report and its text.
func TestExplainShowsOnLimit(t *testing.T) {
	snap := rulestest.Snapshot(t, "tiers.yaml", `domain: api
descriptors:
  - key: tier
    value: vip
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 250ms}
  - key: tier
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1}
`, rules.Options{})
	e := &Explainer{Rules: func() *rules.Snapshot { return snap }}
	for _, tc := range []struct {
		tier, mode, text string
		ms               float64
	}{
		{"vip", "delay", "on limit: delay, queued for at most 250ms", 250},
		{"free", "deny", "on limit: deny", 0},
	} {
		rep, err := e.Explain(context.Background(), req("api", "tier="+tc.tier))
		if err != nil {
			t.Fatal(err)
		}
		l := rep.Descriptors[0].Limits[0]
		if l.OnLimit != tc.mode || l.MaxDelayMS != tc.ms {
			t.Errorf("%s: on_limit %q max_delay_ms %v, want %q %v", tc.tier, l.OnLimit, l.MaxDelayMS, tc.mode, tc.ms)
		}
		var b bytes.Buffer
		if err := WriteText(&b, rep); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.text) {
			t.Errorf("%s: text lacks %q:\n%s", tc.tier, tc.text, &b)
		}
	}
}
