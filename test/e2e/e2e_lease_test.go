package e2e

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// leaseRules: one hot-key limit per leasing algorithm, each `lease: auto`.
const leaseRules = `
domain: lease
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 400, lease: auto}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 400, lease: auto}
  - key: fw
    rate_limit: {unit: second, requests_per_unit: 400, algorithm: fixed_window, lease: auto}
`

// leaseArgs make counters hot quickly, so the short runs below lease.
var leaseArgs = []string{"--lease-ttl=100ms", "--lease-hot-rps=50", "--lease-max-fraction=0.1"}

// TestLeaseAccuracy is the accuracy test with real processes: 4
// envoy-rls replicas on one Redis (standalone, then Cluster) × 64 gRPC
// callers each, all on one key, for every leasing algorithm. Admitted
// requests must stay within the algorithm's bound for the elapsed time (0
// over-admissions) and reach 95% of it, and the replicas' metrics must show
// leases granted and decisions answered locally. The load is bounded by a
// deadline and a per-caller count, on loopback. It does not run in
// parallel with the other tests: it needs the CPU to saturate the limits.
func TestLeaseAccuracy(t *testing.T) {
	for _, dep := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"standalone", func(t *testing.T) string { return "redis://" + redistest.Standalone(t).Addr }},
		{"cluster", func(t *testing.T) string { return "redis+cluster://" + strings.Join(redistest.Cluster(t).Addrs, ",") }},
	} {
		t.Run(dep.name, func(t *testing.T) {
			url := dep.url(t)
			dir := rulesDir(t, map[string]string{"lease.yaml": leaseRules})
			replicas := make([]*server, 4)
			for i := range replicas {
				replicas[i] = startServer(t, serveOpts{ConfigDir: dir, Args: append([]string{"--redis-url", url}, leaseArgs...)})
			}
			for _, tc := range []struct {
				key          string
				limit, burst int64 // per second
				window       bool
			}{
				{key: "tb", limit: 100, burst: 400},
				{key: "gcra", limit: 100, burst: 400},
				{key: "fw", limit: 400, window: true},
			} {
				t.Run(tc.key, func(t *testing.T) {
					var bound, admitted, attempts int64
					if tc.window {
						// Inside two whole one-second windows: the bound is
						// exactly two limits.
						now := time.Now().UnixMicro()
						next := now - now%1_000_000 + 1_000_000
						time.Sleep(time.Duration(next-now+5000) * time.Microsecond)
						admitted, attempts, _ = leaseLoad(t, replicas, tc.key, time.UnixMicro(next+2_000_000-150_000))
						bound = 2 * tc.limit
					} else {
						var elapsed time.Duration
						admitted, attempts, elapsed = leaseLoad(t, replicas, tc.key, time.Now().Add(2*time.Second))
						bound = tc.burst + elapsed.Microseconds()*tc.limit/1_000_000
					}
					t.Logf("admitted %d of bound %d (%.1f%%) in %d attempts", admitted, bound, 100*float64(admitted)/float64(bound), attempts)
					backendtest.CheckSaturatedBound(t, admitted, attempts, bound)
				})
			}
			var granted, local float64
			for _, s := range replicas {
				m := s.scrape()
				granted += m.get("envoy_rls_lease_granted_total", nil)
				local += m.get("envoy_rls_lease_local_decisions_total", nil)
			}
			t.Logf("leases granted %v, local decisions %v", granted, local)
			if granted == 0 || local == 0 {
				t.Errorf("leases granted %v, local decisions %v: the lease path was not exercised", granted, local)
			}
			for _, s := range replicas {
				s.stop()
			}
		})
	}
}

// leaseLoad runs 64 callers per replica on descriptor key=hot until
// deadline (at most 2000 calls each) and returns the admitted count, the
// attempts, and the time from before the first call to after the last.
func leaseLoad(t *testing.T, replicas []*server, key string, deadline time.Time) (admitted, attempts int64, elapsed time.Duration) {
	t.Helper()
	var adm, att, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range replicas {
		client := s.rls()
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := &pb.RateLimitRequest{Domain: "lease", Descriptors: []*rlv3.RateLimitDescriptor{desc(key, "hot")}}
				for n := 0; n < 2000 && time.Now().Before(deadline); n++ {
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					resp, err := client.ShouldRateLimit(ctx, req)
					cancel()
					att.Add(1)
					if err != nil {
						failed.Add(1)
						continue
					}
					if resp.GetOverallCode() == pb.RateLimitResponse_OK {
						adm.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed = time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d calls failed", n)
	}
	return adm.Load(), att.Load(), elapsed
}

// TestLeaseReplicaKilled: a replica killed (SIGKILL) with a lease in hand
// loses at most that lease: the other replicas still admit everything
// else of a bucket that barely refills, and exactly so.
func TestLeaseReplicaKilled(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	dir := rulesDir(t, map[string]string{"lease.yaml": `
domain: lease
descriptors:
  - key: slow
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: token_bucket, burst: 2000, lease: auto}
`})
	args := []string{"--redis-url", "redis://" + r.Addr, "--lease-ttl=1h", "--lease-hot-rps=0.01", "--lease-max-fraction=0.1"}
	victim := startServer(t, serveOpts{ConfigDir: dir, Args: args})
	other := startServer(t, serveOpts{ConfigDir: dir, Args: args})
	// The victim sees the counter hot at once (0.01 rps over an hour is 36
	// hits), leases, and serves from the lease.
	var used int64
	for range 100 {
		if victim.ask("lease", desc("slow", "k")).GetOverallCode() == pb.RateLimitResponse_OK {
			used++
		}
	}
	m := victim.scrape()
	granted, local := m.get("envoy_rls_lease_granted_total", nil), m.get("envoy_rls_lease_local_decisions_total", nil)
	if granted < 1 || local < 1 || used != 100 {
		t.Fatalf("victim: %d of 100 admitted, %v leases, %v local decisions; want a lease serving", used, granted, local)
	}
	victim.proc.Kill()
	// The largest lease the victim can hold is a tenth of what remained
	// when it was granted: at most 200 of the 2000.
	const maxLease = 200
	var admitted int64
	for range 2000 {
		if other.ask("lease", desc("slow", "k")).GetOverallCode() == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	lost := 2000 - used - admitted
	t.Logf("victim used %d, the other admitted %d: %d lost with the killed replica", used, admitted, lost)
	if lost < 0 {
		t.Fatalf("admitted %d + %d > burst 2000: over-admission", used, admitted)
	}
	if lost > maxLease {
		t.Fatalf("lost %d hits with the killed replica, more than its largest lease (%d)", lost, maxLease)
	}
}
