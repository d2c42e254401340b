package rls

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestHeadersConsistent drains one limit on every algorithm, with and
// without a burst, at one instant. On every answer the headers must agree
// with each other: remaining never above the announced limit, the first
// answer one below it, the draft quota and remaining equal to the legacy
// ones, and quota/window the configured rate. The announced limit is the
// most the limit admits at once, so exactly that many requests pass.
func TestHeadersConsistent(t *testing.T) {
	type tc struct {
		algo  algo.Algorithm
		burst int // 0: none in the rule
		quota int // the announced limit: the capacity
		w     int // the announced window, seconds
	}
	var tests []tc
	for _, a := range algo.Algorithms {
		tests = append(tests, tc{algo: a, quota: 20, w: 1})
		if a.UsesBurst() {
			tests = append(tests, tc{algo: a, burst: 40, quota: 40, w: 2}, tc{algo: a, burst: 5, quota: 5, w: 1})
		}
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/burst=%d", tt.algo, tt.burst), func(t *testing.T) {
			burst := ""
			if tt.burst > 0 {
				burst = ", burst: " + strconv.Itoa(tt.burst)
			}
			yaml := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: r, unit: second, requests_per_unit: 20, algorithm: %s%s}\n", tt.algo, burst)
			s, _ := newTestService(t, yaml, func(c *Config) { c.Headers = HeaderOptions{Draft: true, Legacy: true} })
			passed := 0
			for i := range tt.quota + 1 {
				resp := call(t, s, request("d", desc("k=v")))
				h := map[string]string{}
				for _, hv := range resp.GetResponseHeadersToAdd() {
					h[hv.GetKey()] = hv.GetValue()
				}
				limit, _ := strconv.Atoi(h["X-RateLimit-Limit"])
				remaining, err := strconv.Atoi(h["X-RateLimit-Remaining"])
				if err != nil || limit != tt.quota || remaining > limit {
					t.Fatalf("request %d: X-RateLimit-Limit %q, X-RateLimit-Remaining %q; want limit %d and remaining at most it", i+1, h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"], tt.quota)
				}
				if i == 0 && remaining != tt.quota-1 {
					t.Errorf("first request: remaining %d, want %d (the full limit less this hit)", remaining, tt.quota-1)
				}
				wantPolicy := fmt.Sprintf(`"r";q=%d;w=%d`, tt.quota, tt.w)
				if h["RateLimit-Policy"] != wantPolicy {
					t.Errorf("request %d: RateLimit-Policy %q, want %q", i+1, h["RateLimit-Policy"], wantPolicy)
				}
				if !strings.HasPrefix(h["RateLimit"], fmt.Sprintf(`"r";r=%d;`, remaining)) {
					t.Errorf("request %d: RateLimit %q disagrees with X-RateLimit-Remaining %d", i+1, h["RateLimit"], remaining)
				}
				if resp.GetOverallCode() == pb.RateLimitResponse_OK {
					passed++
				}
			}
			if passed != tt.quota {
				t.Errorf("%d requests passed at one instant, want the announced limit %d", passed, tt.quota)
			}
		})
	}
}
