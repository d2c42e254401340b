package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// epoch is aligned to every window length used here, so window arithmetic
// in the expectations stays simple.
var epoch = time.Unix(1_700_006_400, 0)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newTestService serves the YAML rules on a memstore, with the service's
// clock (the time of each request) a fake one.
func newTestService(t testing.TB, yaml string, mutate func(*Config)) (*Service, *clock) {
	t.Helper()
	clk := &clock{t: epoch}
	cfg := Config{Backend: newStore(t), Now: clk.Now}
	if mutate != nil {
		mutate(&cfg)
	}
	return newService(t, mustSnapshot(t, yaml), cfg), clk
}

// newService serves snap with the rest of cfg.
func newService(t testing.TB, snap *rules.Snapshot, cfg Config) *Service {
	t.Helper()
	cfg.Rules = func() *rules.Snapshot { return snap }
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// newStore returns an in-process store.
func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	return s
}

func mustSnapshot(t testing.TB, yaml string) *rules.Snapshot {
	t.Helper()
	return rulestest.Snapshot(t, "test.yaml", yaml, rules.Options{})
}

// withDomain returns yaml with its line "domain: from" naming domain
// instead; compatBackends' domain prefixes go in this way.
func withDomain(t testing.TB, yaml, from, domain string) string {
	t.Helper()
	out := strings.Replace(yaml, "\ndomain: "+from+"\n", "\ndomain: "+strconv.Quote(domain)+"\n", 1)
	if !strings.Contains(out, strconv.Quote(domain)) {
		t.Fatalf("rules YAML has no line %q", "domain: "+from)
	}
	return out
}

// desc builds a descriptor from "key=value" strings.
func desc(kvs ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

func call(t testing.TB, s *Service, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.GetOverallCode() == pb.RateLimitResponse_UNKNOWN {
		t.Fatalf("overall code UNKNOWN")
	}
	if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	return resp
}

type want struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
}

func expectStatus(t testing.TB, st *pb.RateLimitResponse_DescriptorStatus, w want) {
	t.Helper()
	if st.GetCode() != w.code || st.GetLimitRemaining() != w.remaining {
		t.Fatalf("status = %s remaining %d, want %s remaining %d", st.GetCode(), st.GetLimitRemaining(), w.code, w.remaining)
	}
}

const oneLimit = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: ALGO}
`

// TestBurstDenyRecover sends a burst up to the limit, checks the next
// request is denied, and that duration_until_reset is exact: one
// microsecond earlier the request is still denied, at that time it passes.
func TestBurstDenyRecover(t *testing.T) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			s, clk := newTestService(t, strings.Replace(oneLimit, "ALGO", a.String(), 1), func(c *Config) {
				c.Headers = HeaderOptions{RetryAfter: true}
			})
			req := request("d", desc("k=v"))
			for i := range 3 {
				resp := call(t, s, req)
				expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, uint32(2 - i)})
				if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 3 || l.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND {
					t.Fatalf("current_limit = %v, want 3/SECOND", l)
				}
			}
			resp := call(t, s, req)
			if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("4th request: %s, want OVER_LIMIT", resp.OverallCode)
			}
			expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 0})
			// duration_until_reset is when the limit resets, whatever the
			// decision: within the one-second period (the burst of a
			// bucket refills in one period too), and for a sliding window
			// in sub-windows when its newest sub-window has left the
			// period: within a period and one sub-window.
			// It is whole seconds rounded up (what Envoy's header
			// carries), so at most 2s for the sliding window.
			most := time.Second
			if a == algo.SlidingWindow {
				most = 2 * time.Second
			}
			reset := resp.Statuses[0].GetDurationUntilReset().AsDuration()
			if reset <= 0 || reset > most || reset%time.Second != 0 {
				t.Fatalf("duration_until_reset = %v, want whole seconds within (0, %v]", reset, most)
			}
			// Retry-After is when this request would pass, in whole
			// seconds rounded up (backendtest proves the µs value exact).
			var retry string
			for _, h := range resp.GetResponseHeadersToAdd() {
				if h.GetKey() == "Retry-After" {
					retry = h.GetValue()
				}
			}
			secs, err := strconv.Atoi(retry)
			if err != nil || secs < 1 || secs > 2 {
				t.Fatalf("Retry-After %q, want 1 or 2 seconds", retry)
			}
			clk.Advance(time.Duration(secs-1) * time.Second)
			if got := call(t, s, req).OverallCode; got != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("a second before Retry-After: %s, want OVER_LIMIT", got)
			}
			clk.Advance(time.Second)
			if got := call(t, s, req).OverallCode; got != pb.RateLimitResponse_OK {
				t.Fatalf("at Retry-After: %s, want OK", got)
			}
		})
	}
}

// TestNeverRetryAfter: a denial no wait lifts (requests_per_unit 0, or more
// hits than the limit) promises no Retry-After.
func TestNeverRetryAfter(t *testing.T) {
	const blocked = `
domain: d
descriptors:
  - key: ip
    value: 192.0.2.66
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: fixed_window}
`
	s, _ := newTestService(t, blocked, func(c *Config) { c.Headers = HeaderOptions{RetryAfter: true, Legacy: true} })
	big := desc("ip=198.51.100.1")
	big.HitsAddend = wrapperspb.UInt64(4)
	for _, req := range []*pb.RateLimitRequest{request("d", desc("ip=192.0.2.66")), request("d", big)} {
		resp := call(t, s, req)
		if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v: %s, want OVER_LIMIT", req, resp.GetOverallCode())
		}
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() == "Retry-After" {
				t.Fatalf("%v: Retry-After %q on a denial no wait lifts", req, h.GetValue())
			}
		}
	}
}

const twoRules = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: bee}
  - key: free
    rate_limit: {unlimited: true}
`

func TestStatusesInRequestOrder(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	resp := call(t, s, request("d", desc("b=1"), desc("nomatch=x"), desc("a=1"), desc("free=x")))
	expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, 0})
	if resp.Statuses[0].CurrentLimit.GetName() != "bee" || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("status 0 limit = %v, want bee 1/MINUTE", resp.Statuses[0].CurrentLimit)
	}
	expectStatus(t, resp.Statuses[1], want{pb.RateLimitResponse_OK, 0})
	if resp.Statuses[1].CurrentLimit != nil {
		t.Fatalf("unmatched descriptor has current_limit %v", resp.Statuses[1].CurrentLimit)
	}
	expectStatus(t, resp.Statuses[2], want{pb.RateLimitResponse_OK, 4})
	expectStatus(t, resp.Statuses[3], want{pb.RateLimitResponse_OK, math.MaxUint32})
	if resp.Statuses[3].CurrentLimit != nil {
		t.Fatalf("unlimited descriptor has current_limit %v", resp.Statuses[3].CurrentLimit)
	}

	unknown := call(t, s, request("other", desc("a=1")))
	expectStatus(t, unknown.Statuses[0], want{pb.RateLimitResponse_OK, 0})
	if unknown.Statuses[0].CurrentLimit != nil {
		t.Fatal("unknown domain applied a limit")
	}
}

// TestDeniedRequestConsumesNothing: b denies, so a's quota must be untouched.
func TestDeniedRequestConsumesNothing(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	call(t, s, request("d", desc("b=1")))
	resp := call(t, s, request("d", desc("a=1"), desc("b=1")))
	if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("overall %s, want OVER_LIMIT", resp.OverallCode)
	}
	expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, 5})
	expectStatus(t, resp.Statuses[1], want{pb.RateLimitResponse_OVER_LIMIT, 0})
	expectStatus(t, call(t, s, request("d", desc("a=1"))).Statuses[0], want{pb.RateLimitResponse_OK, 4})
}

func TestHitsAddend(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	withHits := func(r *pb.RateLimitRequest, h uint32) *pb.RateLimitRequest { r.HitsAddend = h; return r }
	expectStatus(t, call(t, s, withHits(request("d", desc("a=1")), 0)).Statuses[0], want{pb.RateLimitResponse_OK, 4})
	expectStatus(t, call(t, s, withHits(request("d", desc("a=1")), 2)).Statuses[0], want{pb.RateLimitResponse_OK, 2})

	checkOnly := desc("a=1")
	checkOnly.HitsAddend = wrapperspb.UInt64(0)
	expectStatus(t, call(t, s, withHits(request("d", checkOnly), 3)).Statuses[0], want{pb.RateLimitResponse_OK, 2})

	three := desc("a=1")
	three.HitsAddend = wrapperspb.UInt64(3)
	expectStatus(t, call(t, s, request("d", three)).Statuses[0], want{pb.RateLimitResponse_OVER_LIMIT, 2})

	refund := desc("a=1")
	refund.HitsAddend = wrapperspb.UInt64(2)
	refund.IsNegativeHits = true
	expectStatus(t, call(t, s, request("d", refund)).Statuses[0], want{pb.RateLimitResponse_OK, 4})
}

func TestLimitOverride(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	o := desc("a=1")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2)}
	for i, w := range []want{{pb.RateLimitResponse_OK, 1}, {pb.RateLimitResponse_OK, 0}, {pb.RateLimitResponse_OVER_LIMIT, 0}} {
		resp := call(t, s, request("d", o))
		expectStatus(t, resp.Statuses[0], w)
		l := resp.Statuses[0].CurrentLimit
		if l.GetRequestsPerUnit() != 2 || l.GetUnit() != pb.RateLimitResponse_RateLimit_HOUR || l.GetUnitMultiplier().GetValue() != 2 {
			t.Fatalf("call %d: current_limit %v, want 2 per 2 HOUR", i, l)
		}
	}
	// The override has its own counter: the configured limit is untouched.
	expectStatus(t, call(t, s, request("d", desc("a=1"))).Statuses[0], want{pb.RateLimitResponse_OK, 4})

	// An override still needs a known domain.
	unknown := call(t, s, request("nope", o))
	if unknown.Statuses[0].CurrentLimit != nil {
		t.Fatal("override applied in an unknown domain")
	}
}

func TestShadowAndQuotaMode(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: hard
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
`
	s, _ := newTestService(t, cfg, nil)
	call(t, s, request("d", desc("shadow=1"), desc("quota=1")))
	// Both soft limits are now exhausted, yet the request passes and the
	// enforcing limit is still counted.
	resp := call(t, s, request("d", desc("shadow=1"), desc("quota=1"), desc("hard=1")))
	if resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("overall %s, want OK (soft limits never deny)", resp.OverallCode)
	}
	expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, 0})
	expectStatus(t, resp.Statuses[1], want{pb.RateLimitResponse_OK, 0})
	expectStatus(t, resp.Statuses[2], want{pb.RateLimitResponse_OK, 4})
	md := resp.GetDynamicMetadata().AsMap()
	if md["quotaModeEnabled"] != true {
		t.Fatalf("dynamic metadata %v lacks quotaModeEnabled", md)
	}
	if v, ok := md["quotaModeViolations"].([]any); !ok || len(v) != 1 || v[0] != float64(1) {
		t.Fatalf("quotaModeViolations = %v, want [1]", md["quotaModeViolations"])
	}

	global, _ := newTestService(t, cfg, func(c *Config) { c.ShadowMode = true })
	for range 7 {
		if got := call(t, global, request("d", desc("hard=1"))).OverallCode; got != pb.RateLimitResponse_OK {
			t.Fatalf("global shadow mode answered %s", got)
		}
	}
}

func TestReplaces(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_user}]
`
	s, _ := newTestService(t, cfg, nil)
	for range 3 {
		resp := call(t, s, request("d", desc("user=u"), desc("vip=u")))
		if resp.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("replaced limit still applied: %s", resp.OverallCode)
		}
		if resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("replaced descriptor reports limit %v", resp.Statuses[0].CurrentLimit)
		}
	}
	call(t, s, request("d", desc("user=u")))
	if got := call(t, s, request("d", desc("user=u"))).OverallCode; got != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("without the replacing descriptor per_user applies: got %s", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Headers = HeaderOptions{Draft: true, Legacy: true, RetryAfter: true} })
	headers := func(r *pb.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.GetResponseHeadersToAdd() {
			m[h.GetKey()] = h.GetValue()
		}
		return m
	}
	ok := headers(call(t, s, request("d", desc("b=1"))))
	wantOK := map[string]string{
		"RateLimit-Policy":      `"bee";q=1;w=60`,
		"RateLimit":             `"bee";r=0;t=60`,
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "60",
	}
	for k, v := range wantOK {
		if ok[k] != v {
			t.Errorf("OK response header %s = %q, want %q (all: %v)", k, ok[k], v, ok)
		}
	}
	if _, found := ok["Retry-After"]; found {
		t.Errorf("Retry-After on an OK response")
	}
	over := headers(call(t, s, request("d", desc("b=1"))))
	if over["Retry-After"] != "60" {
		t.Errorf("Retry-After = %q, want 60", over["Retry-After"])
	}
	none, _ := newTestService(t, twoRules, nil)
	if h := call(t, none, request("d", desc("b=1"))).GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("headers added by default: %v", h)
	}
}

func TestInvalidRequests(t *testing.T) {
	s, _ := newTestService(t, twoRules, func(c *Config) {
		c.Limits = RequestLimits{MaxDescriptors: 2, MaxEntries: 2, MaxKeyBytes: 4, MaxValueBytes: 8, MaxHits: 100}
	})
	big := desc("a=1")
	big.HitsAddend = wrapperspb.UInt64(101)
	badUnit := desc("a=1")
	badUnit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	for _, tc := range []struct {
		name string
		req  *pb.RateLimitRequest
		want string
	}{
		{"empty domain", request("", desc("a=1")), "domain: must not be empty"},
		{"no descriptors", request("d"), "descriptors: must not be empty"},
		{"too many descriptors", request("d", desc("a=1"), desc("a=1"), desc("a=1")), "descriptors: 3 descriptors exceed the limit of 2"},
		{"no entries", request("d", desc()), "descriptors[0].entries: must not be empty"},
		{"too many entries", request("d", desc("a=1", "b=2", "c=3")), "descriptors[0].entries: 3 entries exceed the limit of 2"},
		{"empty key", request("d", desc("a=1"), desc("=x")), "descriptors[1].entries[0].key: must not be empty"},
		{"long key", request("d", desc("abcde=1")), "descriptors[0].entries[0].key: 5 bytes exceeds the limit of 4"},
		{"long value", request("d", desc("a=123456789")), "descriptors[0].entries[0].value: 9 bytes exceeds the limit of 8"},
		{"hits", request("d", big), "descriptors[0].hits_addend: 101 exceeds the limit of 100"},
		{"request hits", &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a=1")}, HitsAddend: 101}, "hits_addend: 101 exceeds the limit of 100"},
		{"override unit", request("d", badUnit), "descriptors[0].limit: unknown unit UNKNOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

type failingBackend struct{}

func (failingBackend) Apply(context.Context, time.Time, []algo.Check) ([]algo.Decision, error) {
	return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
}

func TestBackendFailureIsUnavailable(t *testing.T) {
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Backend = failingBackend{} })
	_, err := s.ShouldRateLimit(context.Background(), request("d", desc("a=1")))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want Unavailable naming the cause", err)
	}
	// Requests that match nothing need no backend.
	if _, err := s.ShouldRateLimit(context.Background(), request("d", desc("nomatch=1"))); err != nil {
		t.Fatalf("unmatched request touched the backend: %v", err)
	}
}

// TestSameDescriptorTwice: Envoy may send one descriptor twice (route and
// virtual-host actions); both hits count, as in envoyproxy/ratelimit.
func TestSameDescriptorTwice(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	resp := call(t, s, request("d", desc("a=1"), desc("a=1")))
	expectStatus(t, resp.Statuses[0], want{pb.RateLimitResponse_OK, 3})
	expectStatus(t, resp.Statuses[1], want{pb.RateLimitResponse_OK, 3})
	expectStatus(t, call(t, s, request("d", desc("a=1"))).Statuses[0], want{pb.RateLimitResponse_OK, 2})
}

// TestRepeatedDescriptorWithOverride is issue 10's over-admission: one
// request carries user=a twice, one copy with a limit override of 5 per
// minute, the rule's own period. Both copies name one counter, so a 2-hit
// request moves it by 2, and 5 requests can put at most 5 hits through.
func TestRepeatedDescriptorWithOverride(t *testing.T) {
	const yaml = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`
	for _, be := range compatBackends {
		t.Run(be.name, func(t *testing.T) {
			clk := &clock{t: epoch}
			backend, prefix := be.new(t)
			snap := mustSnapshot(t, withDomain(t, yaml, "d", prefix+"d"))
			s := newService(t, snap, Config{Backend: backend, Now: clk.Now})
			override := desc("user=a")
			override.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
			admitted := 0
			for range 5 {
				resp := call(t, s, request(prefix+"d", desc("user=a"), override))
				if resp.GetOverallCode() == pb.RateLimitResponse_OK {
					admitted += 2
				}
				if a, b := resp.Statuses[0], resp.Statuses[1]; a.GetCode() != b.GetCode() || a.GetLimitRemaining() != b.GetLimitRemaining() {
					t.Fatalf("one counter, two answers: %v and %v", a, b)
				}
			}
			if admitted != 4 {
				t.Fatalf("%d hits admitted through an override of 5 (requests of 2 hits: want 4)", admitted)
			}
		})
	}
}

// timeRecorder records the time each Apply was given, then applies on next.
type timeRecorder struct {
	next Backend
	mu   sync.Mutex
	at   []time.Time
}

func (r *timeRecorder) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	r.mu.Lock()
	r.at = append(r.at, now)
	r.mu.Unlock()
	return r.next.Apply(ctx, now, checks)
}

// TestOneNowPerRequest: the service reads its clock once per request, and
// every backend call of that request (here two: a shadow limit denied, so
// the request is applied again without it) decides at that one time.
func TestOneNowPerRequest(t *testing.T) {
	const rules = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: fixed_window}
`
	var reads atomic.Int64
	var rec *timeRecorder
	s, clk := newTestService(t, rules, func(c *Config) {
		rec = &timeRecorder{next: c.Backend}
		c.Backend = rec
	})
	inner := s.cfg.Now
	s.cfg.Now = func() time.Time { reads.Add(1); clk.Advance(time.Millisecond); return inner() }
	resp := call(t, s, request("d", desc("a=1"), desc("s=1")))
	if resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("overall %s, want OK (the denying limit is in shadow mode)", resp.GetOverallCode())
	}
	if reads.Load() != 1 {
		t.Fatalf("clock read %d times for one request, want 1", reads.Load())
	}
	if len(rec.at) != 2 || !rec.at[0].Equal(rec.at[1]) {
		t.Fatalf("backend calls at %v, want two at one time", rec.at)
	}
}

// TestCountDeniedHits: a client that keeps sending while a per-second
// limit blocks it uses up its daily limit when the limits are charges
// (cost: charge, the default under --count-denied-hits), as with
// envoyproxy/ratelimit, and so stays blocked after the second is over;
// without it, the blocked requests consume nothing. Charges count on
// every algorithm.
func TestCountDeniedHits(t *testing.T) {
	const yaml = `
domain: hammer
descriptors:
  - key: user
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 1, algorithm: fixed_window}
      - {name: per_day, unit: day, requests_per_unit: 3, algorithm: fixed_window}
  - key: svc
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 1, algorithm: fixed_window}
      - {name: per_day, unit: day, requests_per_unit: 3, algorithm: sliding_window}
`
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	tests := []struct {
		countDenied bool
		entry       string
		// after: the answer once the second is over
		after pb.RateLimitResponse_Code
	}{
		{false, "user=a", ok},
		{true, "user=a", over},
		{false, "svc=a", ok},
		{true, "svc=a", over},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/count_denied=%v", tt.entry, tt.countDenied), func(t *testing.T) {
			rules := yaml
			if tt.countDenied {
				rules = strings.ReplaceAll(yaml, "}", ", cost: charge}")
			}
			s, clk := newTestService(t, rules, nil)
			for i, want := range []pb.RateLimitResponse_Code{ok, over, over} {
				if got := call(t, s, request("hammer", desc(tt.entry))).GetOverallCode(); got != want {
					t.Fatalf("request %d: %s, want %s", i, got, want)
				}
			}
			clk.Advance(time.Second)
			if got := call(t, s, request("hammer", desc(tt.entry))).GetOverallCode(); got != tt.after {
				t.Fatalf("after a second: %s, want %s", got, tt.after)
			}
		})
	}
}

// checkRecorder records the checks of every backend call.
type checkRecorder struct {
	next   Backend
	mu     sync.Mutex
	checks []algo.Check
}

func (r *checkRecorder) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	r.mu.Lock()
	r.checks = append(r.checks, checks...)
	r.mu.Unlock()
	return r.next.Apply(ctx, now, checks)
}

// TestLeaseReachesTheCheck: a limit's `lease: auto` is carried to its
// check, for the lease layer; other limits' checks do not lease.
func TestLeaseReachesTheCheck(t *testing.T) {
	const rules = `
domain: d
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, lease: auto}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`
	var rec *checkRecorder
	s, _ := newTestService(t, rules, func(c *Config) {
		rec = &checkRecorder{next: c.Backend}
		c.Backend = rec
	})
	call(t, s, request("d", desc("hot=1"), desc("plain=1")))
	if len(rec.checks) != 2 || !rec.checks[0].Lease || rec.checks[1].Lease {
		t.Fatalf("checks %+v, want the first (lease: auto) leasing and the second not", rec.checks)
	}
}
