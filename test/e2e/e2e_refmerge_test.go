package e2e

import (
	"os"
	"path/filepath"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// TestReferenceEnvMergeDomainConfig: with envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG=true, /bin/ratelimit serves a domain split over two
// files of its runtime directory (the reference's TestDomainMerge case),
// and both files' limits decide.
func TestReferenceEnvMergeDomainConfig(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "key1.yaml"), "domain: ref\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, "key2.yaml"), "domain: ref\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	// The later RUNTIME_ROOT replaces refEnv's (exec keeps the last of a
	// duplicated variable).
	s := startAsRatelimit(t, refEnv(t, r.Addr, "MERGE_DOMAIN_CONFIG=true", "RUNTIME_ROOT="+root))

	for _, tc := range []struct {
		key, value string
		want       []pb.RateLimitResponse_Code
	}{
		{"key1", "value1", []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}},
		{"key2", "value2", []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}},
	} {
		for i, want := range tc.want {
			if got := s.ask("ref", desc(tc.key, tc.value)).OverallCode; got != want {
				t.Fatalf("%s=%s request %d: %s, want %s", tc.key, tc.value, i+1, got, want)
			}
		}
	}
	if !hasLog(t, s.logs.String(), "info", "envoyproxy/ratelimit setting mapped", "MERGE_DOMAIN_CONFIG") {
		t.Errorf("no mapping line for MERGE_DOMAIN_CONFIG; logs:\n%s", s.logs)
	}
}
