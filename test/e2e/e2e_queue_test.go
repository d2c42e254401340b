package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// queueRules: the shaping limit (gcra, 10/s, burst 1, 500 ms of
// queue) and a slow one (1 per 6 s) whose reservations stay held for
// seconds, for cancellation, the hold cap and shutdown.
const queueRules = `
domain: queue
descriptors:
  - key: shape
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 500ms}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 20s}
`

// queued is one answer: its code (or the gRPC error code) and the reserved
// time it reports (0: answered at once).
type queued struct {
	code       string
	reservedAt int64
}

func askQueued(ctx context.Context, t *testing.T, s *server, key string) queued {
	t.Helper()
	resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "queue", Descriptors: []*rlv3.RateLimitDescriptor{desc(key, "k")}})
	if err != nil {
		return queued{code: status.Code(err).String()}
	}
	q := queued{code: resp.GetOverallCode().String()}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == "X-RateLimit-Reserved-At" {
			v, err := strconv.ParseInt(h.GetValue(), 10, 64)
			if err != nil {
				t.Errorf("X-RateLimit-Reserved-At %q: %v", h.GetValue(), err)
			}
			q.reservedAt = v
		}
	}
	return q
}

// TestQueueShapingAcrossReplicas: four envoy-rls processes on one Redis
// (standalone, then Cluster) get 20 requests for one gcra key at once. The
// held answers report reserved times at least 100 ms apart (the output
// never outruns the limit), some requests queue, some are denied at once,
// and the admitted total stays within what the limit allows over the time
// the burst took (measured generously: the bound only grows with it).
func TestQueueShapingAcrossReplicas(t *testing.T) {
	for _, dep := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"standalone", func(t *testing.T) string { return "redis://" + redistest.Standalone(t).Addr }},
		{"cluster", func(t *testing.T) string { return "redis+cluster://" + strings.Join(redistest.Cluster(t).Addrs, ",") }},
	} {
		t.Run(dep.name, func(t *testing.T) {
			url, dir := dep.url(t), rulesDir(t, map[string]string{"queue.yaml": queueRules})
			replicas := make([]*server, 4)
			for i := range replicas {
				// The slow rule's 20s max_delay needs the ceiling raised:
				// through the environment twin here, the flag below.
				replicas[i] = startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--redis-url", url}, Env: []string{"ENVOY_RLS_MAX_DELAY=30s"}})
				askQueued(context.Background(), t, replicas[i], "warm") // connect before the burst
			}
			const n = 20
			answers := make([]queued, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					defer cancel()
					answers[i] = askQueued(ctx, t, replicas[i%len(replicas)], "shape")
				}()
			}
			began := time.Now()
			close(start)
			wg.Wait()
			elapsed := time.Since(began)
			checkShaped(t, answers, elapsed)
		})
	}
}

func checkShaped(t *testing.T, answers []queued, elapsed time.Duration) {
	t.Helper()
	var now, denied int
	var reserved []int64
	for _, a := range answers {
		switch {
		case a.code == "OK" && a.reservedAt != 0:
			reserved = append(reserved, a.reservedAt)
		case a.code == "OK":
			now++
		case a.code == "OVER_LIMIT":
			denied++
		default:
			t.Fatalf("answer %+v", a)
		}
	}
	slices.Sort(reserved)
	t.Logf("%d admitted at once, %d held (reserved at %v), %d denied, in %v", now, len(reserved), reserved, denied, elapsed)
	for i := 1; i < len(reserved); i++ {
		if gap := reserved[i] - reserved[i-1]; gap < 100_000 {
			t.Errorf("reserved times %v: %dµs apart, want at least 100ms (10 per second)", reserved, gap)
		}
	}
	if now < 1 || len(reserved) < 1 || denied < 1 {
		t.Errorf("want some admitted at once, some held and some denied at once")
	}
	// Every admission passes within the burst's wall time; the limit
	// admits at most burst + one per 100 ms of it (+1 for the phase).
	if bound := 2 + int(elapsed/(100*time.Millisecond)); now+len(reserved) > bound {
		t.Errorf("%d admitted in %v, more than the %d the limit allows", now+len(reserved), elapsed, bound)
	}
}

// TestQueueCancelCapAndShutdown, on the in-process store: a caller that
// gives up has its reservation returned (the next request takes its slot);
// past --max-held requests are denied at once and counted; SIGTERM answers
// the held requests OVER_LIMIT at once instead of after their delay, and
// the process exits cleanly.
func TestQueueCancelCapAndShutdown(t *testing.T) {
	dir := rulesDir(t, map[string]string{"queue.yaml": queueRules})
	s := startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--max-delay=30s", "--max-held=2"}})
	held := func(n float64) {
		eventually.Holds(t, "requests held", func() bool { return s.scrape().get("envoy_rls_requests_held", nil) == n })
	}
	if a := askQueued(context.Background(), t, s, "slow"); a.code != "OK" || a.reservedAt != 0 {
		t.Fatalf("first: %+v, want OK at once", a)
	}

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan queued, 1)
	go func() { gaveUp <- askQueued(ctx, t, s, "slow") }()
	held(1)
	cancel()
	if a := <-gaveUp; a.code != codes.Canceled.String() {
		t.Fatalf("cancelled caller: %+v, want Canceled", a)
	}
	eventually.Holds(t, "the reservation is returned", func() bool {
		return s.scrape().get("envoy_rls_reservations_returned_total", nil) == 1
	})

	answers := make(chan queued, 2)
	for range 2 {
		go func() { answers <- askQueued(context.Background(), t, s, "slow") }()
	}
	held(2)
	if a := askQueued(context.Background(), t, s, "slow"); a.code != "OVER_LIMIT" {
		t.Fatalf("past --max-held: %+v, want OVER_LIMIT at once", a)
	}
	if n := s.scrape().get("envoy_rls_hold_cap_denials_total", nil); n != 1 {
		t.Fatalf("envoy_rls_hold_cap_denials_total %v, want 1", n)
	}

	s.signal(syscall.SIGTERM)
	for range 2 {
		if a := <-answers; a.code != "OVER_LIMIT" {
			t.Fatalf("held at shutdown: %+v, want OVER_LIMIT", a)
		}
	}
	if code := s.wait(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM with held requests, want 0", code)
	}
}
