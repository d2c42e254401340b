package rlqs

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const testRules = `
domain: d
descriptors:
  - key: name
    value: api
    descriptors:
      - key: client
        rate_limit: {name: api, unit: second, requests_per_unit: 20}
  - key: name
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: free
    rate_limit: {unlimited: true}
  - key: name
    value: slow
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: name
    value: team
    descriptors:
      - key: client
        value: "team-*"
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 10}
`

// clock is a settable test clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newTestServer(t *testing.T, c *clock, usage Usage, adjust ...rls.LimitAdjuster) *Server {
	t.Helper()
	snap := rulestest.Snapshot(t, "rlqs.yaml", testRules, rules.Options{})
	s, err := New(Config{Rules: func() *rules.Snapshot { return snap }, Usage: usage, Adjust: adjust,
		KeyOrder: []string{"name", "client"}, Unknown: DenyAll, FailureMode: DenyAll, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// report is one bucket's usage: n requests over elapsed.
func report(bucket map[string]string, n uint64, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports {
	return &rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqspb.BucketId{Bucket: bucket},
		TimeElapsed:        durationpb.New(elapsed),
		NumRequestsAllowed: n / 2, NumRequestsDenied: n - n/2,
	}}}
}

// answer sends one report on instance's stream and returns the one
// assignment it got (nil for none).
func answer(t *testing.T, s *Server, ss *streamState, m *rlqspb.RateLimitQuotaUsageReports) *Assignment {
	t.Helper()
	s.handle(context.Background(), ss, m)
	if ss.take() == nil {
		return nil
	}
	key := BucketKey(m.GetDomain(), m.GetBucketQuotaUsages()[0].GetBucketId().GetBucket())
	return ss.sent[key]
}

func newStream(instance string) *streamState { return newStreamState(instance) }

var alice = map[string]string{"name": "api", "client": "alice"}

// TestSharesAcrossReplicas: two replicas on one Redis split a rule's
// limit between the instances that report to each.
func TestSharesAcrossReplicas(t *testing.T) {
	r := redistest.SharedStandalone(t)
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	usage := NewRedisUsage(r.Client(t), redistest.KeyPrefix(t), UsageTTL(0))
	s1, s2 := newTestServer(t, c, usage), newTestServer(t, c, usage)
	a, b := newStream("a"), newStream("b")

	got := answer(t, s1, a, report(alice, 500, 5*time.Second))
	if got.Kind != "token_bucket" || got.TokensPerFill != 20 || got.Instances != 1 {
		t.Fatalf("a alone: got %+v, want the whole 20/s", got)
	}
	got = answer(t, s2, b, report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 10 || got.Instances != 2 {
		t.Fatalf("b beside a: got %+v, want 10/s of 2 instances", got)
	}
	c.now = c.now.Add(5 * time.Second)
	got = answer(t, s1, a, report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 10 || got.MaxTokens != 10 || got.FillIntervalS != 1 {
		t.Fatalf("a after b joined: got %+v, want 10 per 1 s, burst 10", got)
	}
	// b goes quiet: a gets all but b's floor.
	c.now = c.now.Add(5 * time.Second)
	answer(t, s2, b, report(alice, 0, 5*time.Second))
	got = answer(t, s1, a, report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 19 {
		t.Fatalf("a with b idle: got %+v, want 19/s", got)
	}
	// b stops reporting: its entry expires and a gets everything.
	c.now = c.now.Add(UsageTTL(0) + time.Second)
	got = answer(t, s1, a, report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 20 || got.Instances != 1 {
		t.Fatalf("a after b left: got %+v, want 20/s alone", got)
	}
}

// TestShareThreshold: buckets whose values a share_threshold wildcard
// folds into one counter share one limit, as for ShouldRateLimit; other
// buckets of a wildcard-free key each have their own.
func TestShareThreshold(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTestServer(t, c, nil)
	a := newStream("a")
	answer(t, s, a, report(map[string]string{"name": "team", "client": "team-red"}, 500, 5*time.Second))
	got := answer(t, s, a, report(map[string]string{"name": "team", "client": "team-blue"}, 500, 5*time.Second))
	if got.TokensPerFill != 5 || got.Instances != 2 {
		t.Fatalf("team-blue beside team-red on one instance: got %+v, want 5/s of the shared 10/s", got)
	}
	answer(t, s, a, report(map[string]string{"name": "api", "client": "bob"}, 500, 5*time.Second))
	got = answer(t, s, a, report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 20 || got.Instances != 1 {
		t.Fatalf("alice beside bob: got %+v, want her own 20/s", got)
	}
}

// TestAssignmentKinds: blocked, unlimited and unknown buckets get blanket
// assignments; a per-minute rule a token bucket per minute; a first
// report (no elapsed time) counts as unknown demand.
func TestAssignmentKinds(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTestServer(t, c, nil)
	tests := []struct {
		name   string
		bucket map[string]string
		kind   string
		tokens uint32
		fillS  int64
	}{
		{"blocked", map[string]string{"name": "blocked"}, "deny_all", 0, 0},
		{"unlimited", map[string]string{"name": "free"}, "allow_all", 0, 0},
		{"no rule: the unknown default", map[string]string{"name": "other"}, "deny_all", 0, 0},
		{"per minute", map[string]string{"name": "slow"}, "token_bucket", 60, 60},
		{"key order puts name first", alice, "token_bucket", 20, 1},
		{"an oversized bucket id: the unknown default", map[string]string{"name": "api", "client": strings.Repeat("x", 5000)}, "deny_all", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := answer(t, s, newStream("x-"+tt.name), report(tt.bucket, 1, 0))
			if got == nil || got.Kind != tt.kind || got.TokensPerFill != tt.tokens || got.FillIntervalS != tt.fillS {
				t.Fatalf("got %+v, want %s %d per %d s", got, tt.kind, tt.tokens, tt.fillS)
			}
			if got.Expires.Sub(got.Sent) != 15*time.Second {
				t.Errorf("ttl %v, want 3 report intervals", got.Expires.Sub(got.Sent))
			}
		})
	}
	// A domain no rule file names is not a label value: Envoy chooses it.
	unknown := report(map[string]string{"name": "x"}, 1, 0)
	unknown.Domain = "made-up"
	answer(t, s, newStream("y"), unknown)
	if n := testutil.ToFloat64(s.cfg.Metrics.assignments.WithLabelValues(rls.UnknownDomainLabel, "", "deny_all")); n != 1 {
		t.Errorf("assignments for an unknown domain counted %v under %q, want 1", n, rls.UnknownDomainLabel)
	}
}

// halve is a limit adjuster that halves every limit, as an override would.
type halve struct{}

func (halve) AdjustLimit(_ time.Time, _ string, _ *rules.Rule, _ *rules.Limit, p algo.Policy) algo.Policy {
	p.Limit /= 2
	return p
}

// TestAdjustersApply: the same limit adjusters as ShouldRateLimit's change
// the assignment.
func TestAdjustersApply(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTestServer(t, c, nil, halve{})
	got := answer(t, s, newStream("a"), report(alice, 500, 5*time.Second))
	if got.TokensPerFill != 10 {
		t.Fatalf("got %+v, want the halved 10/s", got)
	}
}

// TestUsageOutage: with Redis down the last assignment stands (nothing is
// sent) until its TTL, then the failure mode is sent.
func TestUsageOutage(t *testing.T) {
	r := redistest.Standalone(t)
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTestServer(t, c, NewRedisUsage(r.Client(t), redistest.KeyPrefix(t), UsageTTL(0)))
	s.cfg.UsageTimeout = 300 * time.Millisecond
	a := newStream("a")
	if got := answer(t, s, a, report(alice, 500, 5*time.Second)); got.Kind != "token_bucket" {
		t.Fatalf("before the outage: got %+v", got)
	}
	r.Kill(t)
	c.now = c.now.Add(5 * time.Second)
	if got := answer(t, s, a, report(alice, 500, 5*time.Second)); got != nil {
		t.Fatalf("Redis down, last assignment live: sent %+v, want nothing", got)
	}
	c.now = c.now.Add(15 * time.Second)
	got := answer(t, s, a, report(alice, 500, 5*time.Second))
	if got == nil || got.Kind != "deny_all" {
		t.Fatalf("Redis down past the TTL: got %+v, want the failure mode deny_all", got)
	}
}

func TestEntries(t *testing.T) {
	tests := []struct {
		name   string
		bucket map[string]string
		order  []string
		want   []algo.Entry
	}{
		{"sorted without an order", map[string]string{"name": "api", "client": "a"}, nil,
			[]algo.Entry{{Key: "client", Value: "a"}, {Key: "name", Value: "api"}}},
		{"order first", map[string]string{"name": "api", "client": "a"}, []string{"name", "client"},
			[]algo.Entry{{Key: "name", Value: "api"}, {Key: "client", Value: "a"}}},
		{"unlisted keys follow sorted", map[string]string{"z": "1", "name": "api", "b": "2"}, []string{"name", "missing"},
			[]algo.Entry{{Key: "name", Value: "api"}, {Key: "b", Value: "2"}, {Key: "z", Value: "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Entries(tt.bucket, tt.order)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	if BucketKey("d", map[string]string{"a": "b,c"}) == BucketKey("d", map[string]string{"a": "b", "c": ""}) {
		t.Error("BucketKey: two buckets share a name")
	}
}

// TestRefreshPushes: when an instance on one replica reports that it went
// idle, the other replica's refresh pushes the freed share to its own
// instance without waiting for that instance's next report; an unchanged
// share is not pushed again.
func TestRefreshPushes(t *testing.T) {
	r := redistest.SharedStandalone(t)
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	usage := NewRedisUsage(r.Client(t), redistest.KeyPrefix(t), UsageTTL(0))
	s1, s2 := newTestServer(t, c, usage), newTestServer(t, c, usage)
	a, b := newStream("a"), newStream("b")
	s1.streams[a] = struct{}{}
	s2.streams[b] = struct{}{}
	answer(t, s1, a, report(alice, 500, 5*time.Second))
	answer(t, s2, b, report(alice, 500, 5*time.Second))
	answer(t, s1, a, report(alice, 500, 5*time.Second))

	c.now = c.now.Add(time.Second)
	s1.refresh(context.Background())
	if pushed := a.take(); pushed != nil {
		t.Fatalf("nothing changed, yet refresh pushed %v", pushed)
	}
	answer(t, s2, b, report(alice, 0, 5*time.Second))
	c.now = c.now.Add(time.Second)
	s1.refresh(context.Background())
	pushed := a.take()
	if pushed == nil {
		t.Fatal("refresh pushed nothing, want a's new share")
	}
	tb := pushed.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb.GetTokensPerFill().GetValue() != 19 {
		t.Fatalf("pushed %v, want a 19/s token bucket", pushed)
	}
}

func TestKeepNear(t *testing.T) {
	tb := func(tokens, maxTokens uint32) *Assignment {
		return &Assignment{Kind: "token_bucket", TokensPerFill: tokens, MaxTokens: maxTokens, FillIntervalS: 1}
	}
	tests := []struct {
		name       string
		prev, next *Assignment
		want       uint32
	}{
		{"no previous", nil, tb(100, 100), 100},
		{"within 5% keeps the previous", tb(100, 100), tb(104, 104), 100},
		{"within 5% down keeps the previous", tb(100, 100), tb(95, 95), 100},
		{"beyond 5% changes", tb(100, 100), tb(106, 106), 106},
		{"small shares always change", tb(10, 10), tb(11, 11), 11},
		{"a blanket before changes", &Assignment{Kind: "deny_all"}, tb(100, 100), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.next.keepNear(tt.prev)
			if tt.next.TokensPerFill != tt.want || tt.next.MaxTokens != tt.want {
				t.Errorf("got %d (max %d), want %d", tt.next.TokensPerFill, tt.next.MaxTokens, tt.want)
			}
		})
	}
}

// TestStreamOverGRPC drives the service over a real gRPC stream while Run
// refreshes concurrently: every report is answered for its bucket, and the
// instance is named by its metadata.
func TestStreamOverGRPC(t *testing.T) {
	snap := rulestest.Snapshot(t, "rlqs.yaml", testRules, rules.Options{})
	s, err := New(Config{Rules: func() *rules.Snapshot { return snap }, KeyOrder: []string{"name", "client"}, Refresh: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(l) }()
	defer g.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()

	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(ctx, InstanceHeader, "edge-7")
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := st.Send(report(alice, uint64(100*i), 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Refresh may push too: every message must name alice's bucket.
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b := resp.GetBucketAction()[0].GetBucketId().GetBucket(); b["client"] != "alice" || b["name"] != "api" {
			t.Fatalf("answer for bucket %v, want alice's", b)
		}
	}
	as := s.Assignments()
	if len(as) != 1 || as[0].Instance != "edge-7" || as[0].Kind != "token_bucket" {
		t.Fatalf("assignments %+v, want edge-7's token bucket", as)
	}
	// Drain ends the stream, with Unavailable so Envoy retries elsewhere.
	s.Drain()
	for {
		_, err := st.Recv()
		if err == nil {
			continue // a push in flight
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("after Drain: %v, want Unavailable", err)
		}
		break
	}
}
