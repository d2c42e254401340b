package rls

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
)

// queueRules: VIPs queue for up to 500 ms at 10/s, burst 1; the others are
// denied at once by a limit of the same rate, and an extra deny-mode limit
// on the VIP key checks all or nothing.
const queueRules = `
domain: api
descriptors:
  - key: tier
    value: vip
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 500ms}
  - key: tier
    value: free
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 1, on_limit: delay, max_delay: 500ms}
      - {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
`

func newQueueService(t *testing.T, maxHeld int) (*Service, *HoldMetrics) {
	t.Helper()
	m := NewHoldMetrics(prometheus.NewRegistry())
	s, _ := newTestService(t, queueRules, func(c *Config) { c.Hold = HoldConfig{MaxHeld: maxHeld, Metrics: m} })
	t.Cleanup(s.ReleaseHeld)
	return s, m
}

// answer is one request's outcome: its overall code, or the gRPC code of
// its error, and its reported reserved time (0 when none).
type answer struct {
	code       string
	reservedAt int64
}

func ask(ctx context.Context, t *testing.T, s *Service, req *pb.RateLimitRequest) answer {
	t.Helper()
	resp, err := s.ShouldRateLimit(ctx, req)
	if err != nil {
		return answer{code: status.Code(err).String()}
	}
	a := answer{code: resp.GetOverallCode().String()}
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == ReservedAtHeader {
			v, err := strconv.ParseInt(h.GetValue(), 10, 64)
			if err != nil {
				t.Errorf("%s: %v", ReservedAtHeader, err)
			}
			a.reservedAt = v
		}
	}
	return a
}

// askAll sends n requests at once and returns their answers.
func askAll(t *testing.T, s *Service, n int, req *pb.RateLimitRequest) []answer {
	t.Helper()
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = ask(context.Background(), t, s, req) }()
	}
	wg.Wait()
	return out
}

func TestHoldShapes(t *testing.T) {
	s, m := newQueueService(t, 0)
	answers := askAll(t, s, 20, request("api", desc("tier=vip")))
	var ok, over int
	var reserved []int64
	for _, a := range answers {
		switch a.code {
		case "OK":
			ok++
			if a.reservedAt != 0 {
				reserved = append(reserved, a.reservedAt)
			}
		case "OVER_LIMIT":
			over++
		default:
			t.Fatalf("answer %+v", a)
		}
	}
	slices.Sort(reserved)
	if ok != 6 || over != 14 || len(reserved) != 5 {
		t.Fatalf("%d OK (%d of them held, reserved at %v), %d OVER_LIMIT; want 6 OK, 5 held, 14 OVER_LIMIT", ok, len(reserved), reserved, over)
	}
	for i, at := range reserved {
		if want := epoch.UnixMicro() + int64(i+1)*100_000; at != want {
			t.Errorf("reserved times %v: #%d at %d, want %d (100 ms apart from the arrival)", reserved, i, at, want)
		}
	}
	if n := testutil.CollectAndCount(m.delay); n != 1 || s.Held() != 0 {
		t.Errorf("delay histogram series %d, held now %d; want 1, 0", n, s.Held())
	}
	// The free tier never queues: one passes, the others are denied.
	free := askAll(t, s, 3, request("api", desc("tier=free")))
	slices.SortFunc(free, func(a, b answer) int { return strings.Compare(a.code, b.code) })
	if !slices.Equal(free, []answer{{code: "OK"}, {code: "OVER_LIMIT"}, {code: "OVER_LIMIT"}}) {
		t.Errorf("free tier: %+v, want one OK and two OVER_LIMIT, none held", free)
	}
}

func TestHoldAllOrNothing(t *testing.T) {
	s, _ := newQueueService(t, 0)
	bg := context.Background()
	steps := []struct {
		name       string
		req        *pb.RateLimitRequest
		code       string
		reservedAt int64 // µs after epoch; 0: answered at once
	}{
		{"both limits admit", request("api", desc("both=x")), "OK", 0},
		{"queued limit waits, the other admits", request("api", desc("both=x")), "OK", 100_000},
		{"the deny-mode limit is spent", request("api", desc("both=x")), "OVER_LIMIT", 0},
		{"vip admits", request("api", desc("tier=vip")), "OK", 0},
		{"free admits", request("api", desc("tier=free")), "OK", 0},
		{"vip would queue, free denies", request("api", desc("tier=vip"), desc("tier=free")), "OVER_LIMIT", 0},
		// Nothing was reserved by the denied request: the first slot.
		{"vip queues to the first slot", request("api", desc("tier=vip")), "OK", 100_000},
	}
	for _, st := range steps {
		a := ask(bg, t, s, st.req)
		want := answer{code: st.code}
		if st.reservedAt != 0 {
			want.reservedAt = epoch.UnixMicro() + st.reservedAt
		}
		if a != want {
			t.Fatalf("%s: %+v, want %+v", st.name, a, want)
		}
	}
}

// holdOne sends req in the background and waits until the service holds
// held requests; the answer arrives on the returned channel.
func holdOne(ctx context.Context, t *testing.T, s *Service, req *pb.RateLimitRequest, held int) <-chan answer {
	t.Helper()
	ch := make(chan answer, 1)
	go func() { ch <- ask(ctx, t, s, req) }()
	eventually.Holds(t, "the request is held", func() bool { return s.Held() == held })
	return ch
}

func TestHoldCancelReturnsReservation(t *testing.T) {
	s, m := newQueueService(t, 0)
	req := request("api", desc("tier=vip"))
	ask(context.Background(), t, s, req) // the burst
	ctx, cancel := context.WithCancel(context.Background())
	ch := holdOne(ctx, t, s, req, 1)
	cancel()
	if a := <-ch; a.code != codes.Canceled.String() {
		t.Fatalf("cancelled caller: %+v, want Canceled", a)
	}
	if n := testutil.ToFloat64(m.returned); n != 1 {
		t.Fatalf("reservations returned %v, want 1", n)
	}
	// The returned slot is the next request's.
	if a := ask(context.Background(), t, s, req); a.reservedAt != epoch.UnixMicro()+100_000 {
		t.Fatalf("after the cancel: %+v, want the slot at +100ms again", a)
	}
}

func TestHoldCapAndRelease(t *testing.T) {
	s, m := newQueueService(t, 2)
	req := request("api", desc("tier=vip"))
	ask(context.Background(), t, s, req) // the burst
	first := holdOne(context.Background(), t, s, req, 1)
	second := holdOne(context.Background(), t, s, req, 2)
	// The cap is reached: denied at once, counted, nothing reserved.
	if a := ask(context.Background(), t, s, req); a.code != "OVER_LIMIT" {
		t.Fatalf("past the cap: %+v, want OVER_LIMIT", a)
	}
	if n := testutil.ToFloat64(m.capDenied); n != 1 {
		t.Fatalf("cap denials %v, want 1", n)
	}
	// Shutdown: both held requests are denied at once, their slots given
	// back (the later first: the earlier then is the latest).
	s.ReleaseHeld()
	for _, ch := range []<-chan answer{first, second} {
		if a := <-ch; a.code != "OVER_LIMIT" {
			t.Fatalf("released at shutdown: %+v, want OVER_LIMIT", a)
		}
	}
	if s.Held() != 0 {
		t.Fatalf("%d still held", s.Held())
	}
	// After the release nothing queues.
	if a := ask(context.Background(), t, s, req); a.code != "OVER_LIMIT" || a.reservedAt != 0 {
		t.Fatalf("after the release: %+v, want OVER_LIMIT at once", a)
	}
}

// TestHoldHeaders: a held request's answer carries the usual headers (of
// the limit at its reserved time) and its reserved time and delay.
func TestHoldHeaders(t *testing.T) {
	s, _ := newTestService(t, queueRules, func(c *Config) { c.Headers = HeaderOptions{Legacy: true} })
	t.Cleanup(s.ReleaseHeld)
	req := request("api", desc("tier=vip"))
	call(t, s, req)
	resp := call(t, s, req)
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{
		"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
		ReservedAtHeader: strconv.FormatInt(epoch.UnixMicro()+100_000, 10), DelayHeader: "100.000",
	}
	if resp.GetOverallCode() != pb.RateLimitResponse_OK || !maps.Equal(got, want) {
		t.Fatalf("%v, headers %v; want OK with %v", resp.GetOverallCode(), got, want)
	}
}

// TestHoldWarnsOfShortDeadlines: a caller whose deadline is shorter than a
// queued limit's max_delay (500ms here) is warned about once per limit,
// naming the fix; a long enough deadline, a limit that never queues, and
// a caller without a deadline are not.
func TestHoldWarnsOfShortDeadlines(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	m := NewHoldMetrics(prometheus.NewRegistry())
	s, _ := newTestService(t, queueRules, func(c *Config) {
		c.Hold = HoldConfig{Metrics: m}
		c.Logger = zap.New(core)
	})
	t.Cleanup(s.ReleaseHeld)
	askWithin := func(d time.Duration, req *pb.RateLimitRequest) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		ask(ctx, t, s, req)
	}
	askWithin(time.Second, request("api", desc("tier=vip")))
	ask(context.Background(), t, s, request("api", desc("tier=vip")))
	for range 5 {
		askWithin(100*time.Millisecond, request("api", desc("tier=free")))
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings before any short deadline met a queued limit: %v", n, logs.All())
	}
	for range 5 {
		askWithin(100*time.Millisecond, request("api", desc("tier=vip")))
		askWithin(100*time.Millisecond, request("api", desc("both=x")))
	}
	lines := logs.All()
	if len(lines) != 2 {
		t.Fatalf("%d warnings, want one per queued limit (vip, both's first): %v", len(lines), lines)
	}
	limits := map[string]bool{}
	for _, l := range lines {
		f := l.ContextMap()
		limits[f["rule"].(string)+" "+f["limit"].(string)] = true
		if !strings.Contains(l.Message, "raise the rate_limit filter's timeout above max_delay, or lower max_delay") {
			t.Errorf("warning %q names no fix", l.Message)
		}
		if f["max_delay"] != 500*time.Millisecond {
			t.Errorf("warning fields %v, want max_delay 500ms", f)
		}
		if d, _ := f["deadline"].(time.Duration); d <= 0 || d > 100*time.Millisecond {
			t.Errorf("warning fields %v, want the deadline left (0..100ms]", f)
		}
	}
	if len(limits) != 2 {
		t.Errorf("warned limits %v, want two different ones", limits)
	}
}
