package e2e

import (
	"os"
	"path/filepath"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestPerVersionLimits serves the shipped per-version rules
// (examples/config/versions.yaml) on Redis and sends the descriptors the
// per-version EnvoyFilter produces. Each call asks for several hits at
// once, so the answers depend on the limits alone: stable (500/s) takes
// 60 where the canary (50/s) cannot, and the canary, at the start of its
// ten-minute ramp from a fifth, takes 10 but not 30.
func TestPerVersionLimits(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "config", "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startOnRedis(t, map[string]string{"versions.yaml": string(b)})
	tests := []struct {
		version string
		hits    uint64
		want    pb.RateLimitResponse_Code
		limit   uint32 // current_limit reported
	}{
		{"stable", 60, pb.RateLimitResponse_OK, 500},
		{"canary", 60, pb.RateLimitResponse_OVER_LIMIT, 10},
		{"canary", 30, pb.RateLimitResponse_OVER_LIMIT, 10},
		{"canary", 10, pb.RateLimitResponse_OK, 10},
		{"unrouted", 21, pb.RateLimitResponse_OVER_LIMIT, 20},
	}
	for _, tt := range tests {
		d := desc("version", tt.version)
		d.HitsAddend = wrapperspb.UInt64(tt.hits)
		st := s.ask("versions", d).Statuses[0]
		// The ramp grows by under a tenth of a request a second: a
		// slow machine may see 10 or 11 on the canary, never 50.
		got := st.GetCurrentLimit().GetRequestsPerUnit()
		if st.Code != tt.want || got < tt.limit || got > tt.limit+1 {
			t.Errorf("%s, %d hits: %s with current_limit %d, want %s with %d", tt.version, tt.hits, st.Code, got, tt.want, tt.limit)
		}
	}
}
