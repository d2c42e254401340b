package xdsrules_test

import (
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

// TestExtensionsQueueMode: on_limit and max_delay come from the extensions
// file as from a rule file, and are refused there for the same reasons.
func TestExtensionsQueueMode(t *testing.T) {
	ext, err := xdsrules.ParseExtensions("ext.yaml", []byte("domains: {api: {limits: {vip: {algorithm: gcra, burst: 1, on_limit: delay, max_delay: 400ms}}}}"), opts)
	if err != nil {
		t.Fatal(err)
	}
	conf := xdstest.Config("api-rules", "api",
		&rlsconf.RateLimitDescriptor{Key: "tier", Value: "vip", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 10, Name: "vip"}})
	snap, err := xdsrules.BuildSnapshot([]*rlsconf.RateLimitConfig{conf}, "1", ext, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Match("api", []algo.Entry{{Key: "tier", Value: "vip"}})
	if r == nil || r.Limits[0].MaxDelay != 400*time.Millisecond {
		t.Fatalf("rule %+v, want the vip limit queued for 400ms", r)
	}
	for _, tc := range []struct{ file, want string }{
		{"domains: {api: {defaults: {algorithm: fixed_window, on_limit: delay, max_delay: 100ms}}}", "domains.api.defaults: on_limit: delay for algorithm fixed_window"},
		{"domains: {api: {limits: {x: {algorithm: gcra, on_limit: delay, max_delay: 5s}}}}", "domains.api.limits.x: max_delay: 5s is out of range"},
	} {
		_, err := xdsrules.ParseExtensions("ext.yaml", []byte(tc.file), opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}
