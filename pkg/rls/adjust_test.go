package rls

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// scaleLimit multiplies every limit by factor, or changes the period when
// badPeriod is set (which adjustLimit must refuse).
type scaleLimit struct {
	factor    float64
	badPeriod bool
}

func (s scaleLimit) AdjustLimit(_ time.Time, _ string, _ *rules.Rule, _ *rules.Limit, p algo.Policy) algo.Policy {
	if s.badPeriod {
		p.Period *= 2
		p.Limit = 1
		return p
	}
	p.Limit = int64(float64(p.Limit) * s.factor)
	p.Burst = int64(float64(p.Burst) * s.factor)
	return p
}

// TestLimitAdjusters: the adjusted limit decides and is what statuses
// report; adjusters run in order; one that would move the counter (another
// period) is ignored.
func TestLimitAdjusters(t *testing.T) {
	const rule = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 8, algorithm: ALGO}
`
	tests := []struct {
		name   string
		adjust []LimitAdjuster
		want   uint32
	}{
		{"none", nil, 8},
		{"halved", []LimitAdjuster{scaleLimit{factor: 0.5}}, 4},
		{"halved twice", []LimitAdjuster{scaleLimit{factor: 0.5}, scaleLimit{factor: 0.5}}, 2},
		{"period change ignored", []LimitAdjuster{scaleLimit{factor: 0.5}, scaleLimit{badPeriod: true}}, 4},
	}
	for _, a := range algo.Algorithms {
		for _, tc := range tests {
			t.Run(a.String()+"/"+tc.name, func(t *testing.T) {
				y := strings.Replace(rule, "ALGO", a.String(), 1)
				s, _ := newTestService(t, y, func(c *Config) { c.Adjust = tc.adjust })
				// /debug/config's effective limit is the one statuses report.
				d := mustSnapshot(t, y).Domains()[0]
				if got := s.CurrentLimit("d", d.Rules()[0], &d.Rules()[0].Limits[0]); got != tc.want {
					t.Fatalf("CurrentLimit %d, want %d", got, tc.want)
				}
				req := request("d", desc("k=v"))
				for i := range tc.want {
					resp := call(t, s, req)
					expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, tc.want - 1 - i})
					if got := resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != tc.want {
						t.Fatalf("current_limit %d, want %d", got, tc.want)
					}
				}
				if got := call(t, s, req).OverallCode; got != pb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("request %d: %s, want OVER_LIMIT", tc.want+1, got)
				}
			})
		}
	}
}

// TestEffectiveLimit: the effective limit is the request path's, and it
// names the adjusters that changed it or were ignored.
func TestEffectiveLimit(t *testing.T) {
	s := mustSnapshot(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 8, algorithm: token_bucket}
`)
	r := s.Match("d", []algo.Entry{{Key: "k", Value: "v"}})
	l := &r.Limits[0]
	tests := []struct {
		name    string
		adjust  []LimitAdjuster
		limit   int64
		rpu     uint32
		sources []string
	}{
		{"as configured", nil, 8, 8, nil},
		{"unchanged by a factor of 1", []LimitAdjuster{scaleLimit{factor: 1}}, 8, 8, nil},
		{"halved", []LimitAdjuster{scaleLimit{factor: 0.5}}, 4, 4, []string{"rls.scaleLimit:4"}},
		{"period change ignored", []LimitAdjuster{scaleLimit{factor: 0.5}, scaleLimit{badPeriod: true}}, 4, 4,
			[]string{"rls.scaleLimit:4", "rls.scaleLimit:1:ignored"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := EffectiveLimit(tc.adjust, time.Now(), "d", r, l)
			pol, rpu := adjustLimit(tc.adjust, time.Now(), "d", r, l)
			if e.Policy != pol || e.RequestsPerUnit != rpu {
				t.Errorf("EffectiveLimit = %+v/%d, request path %+v/%d", e.Policy, e.RequestsPerUnit, pol, rpu)
			}
			if e.Policy.Limit != tc.limit || e.RequestsPerUnit != tc.rpu {
				t.Errorf("limit %d rpu %d, want %d %d", e.Policy.Limit, e.RequestsPerUnit, tc.limit, tc.rpu)
			}
			var got []string
			for _, src := range e.Sources {
				s := fmt.Sprintf("%s:%d", src.Name, src.Limit)
				if src.Ignored {
					s += ":ignored"
				}
				got = append(got, s)
			}
			if strings.Join(got, " ") != strings.Join(tc.sources, " ") {
				t.Errorf("sources = %v, want %v", got, tc.sources)
			}
		})
	}
}
