package rlqs

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

// probeServer is a minimal RLQS server that records what Envoy sends and
// lets the test push bucket actions on the open stream. It exists to pin
// down what Envoy 1.40's rate_limit_quota filter does (docs/rlqs.md).
type probeServer struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	mu      sync.Mutex
	reports []probeReport
	streams int
	send    chan *rlqspb.RateLimitQuotaResponse
}

type probeReport struct {
	At  time.Time
	Msg *rlqspb.RateLimitQuotaUsageReports
}

func (p *probeServer) StreamRateLimitQuotas(st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	p.mu.Lock()
	p.streams++
	p.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			p.mu.Lock()
			p.reports = append(p.reports, probeReport{At: time.Now(), Msg: m})
			p.mu.Unlock()
		}
	}()
	for {
		select {
		case err := <-errc:
			return err
		case r := <-p.send:
			if err := st.Send(r); err != nil {
				return err
			}
		}
	}
}

func (p *probeServer) snapshot() []probeReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeReport(nil), p.reports...)
}

// probeBootstrap is an Envoy with the rate_limit_quota filter: one bucket
// per value of the x-client header ({name: probe, client: <x-client>}),
// reports every second, allow all until an assignment arrives, deny all
// when an assignment has expired.
func probeBootstrap(rlqsAddr, upstreamAddr string) string {
	rh, rp, _ := net.SplitHostPort(rlqsAddr)
	uh, up, _ := net.SplitHostPort(upstreamAddr)
	return fmt.Sprintf(envoytest.IngressHead+`            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: upstream}
          http_filters:
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              rlqs_server:
                envoy_grpc: {cluster_name: rlqs}
              domain: probe
              bucket_matchers:
                on_no_match:
                  action:
                    name: per-client
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                      bucket_id_builder:
                        bucket_id_builder:
                          name: {string_value: probe}
                          client:
                            custom_value:
                              name: client
                              typed_config:
                                "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                header_name: x-client
                      reporting_interval: 1s
                      no_assignment_behavior:
                        fallback_rate_limit: {blanket_rule: ALLOW_ALL}
                      expired_assignment_behavior:
                        expired_assignment_behavior_timeout: 30s
                        fallback_rate_limit: {blanket_rule: DENY_ALL}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: upstream
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %s, port_value: %s}}}
  - name: rlqs
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: rlqs
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %s, port_value: %s}}}
`, uh, up, rh, rp)
}

func startProbeUpstream(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), &n
}

func get(t *testing.T, url, client string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("x-client", client)
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.ReadAll(resp.Body)
	return resp.StatusCode
}

// burst sends n requests for client and counts the answers by status.
func burst(t *testing.T, url, client string, n int) map[int]int {
	t.Helper()
	out := map[int]int{}
	for i := 0; i < n; i++ {
		out[get(t, url, client)]++
	}
	return out
}

func action(client string, a *rlqspb.RateLimitQuotaResponse_BucketAction) *rlqspb.RateLimitQuotaResponse {
	a.BucketId = &rlqspb.BucketId{Bucket: map[string]string{"name": "probe", "client": client}}
	return &rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{a}}
}

func assign(client string, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqspb.RateLimitQuotaResponse {
	return action(client, &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    s,
			}}})
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// TestProbeEnvoyRLQS records what Envoy 1.40's rate_limit_quota filter
// does against a minimal RLQS server: it asserts the behaviour
// docs/rlqs.md describes, so an Envoy upgrade that changes it fails here.
func TestProbeEnvoyRLQS(t *testing.T) {
	ps := &probeServer{send: make(chan *rlqspb.RateLimitQuotaResponse, 16)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, ps)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)

	upAddr, upHits := startProbeUpstream(t)
	e := envoytest.Start(t, []byte(probeBootstrap(l.Addr().String(), upAddr)), envoytest.Options{Name: "probe", LogLevel: "warning"})
	la, err := e.ListenerAddr("ingress")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + la + "/"

	// No assignment yet: the fallback (allow all) applies.
	got := burst(t, url, "a", 5)
	passed := got[200] // every 200 is the upstream's answer
	t.Logf("before any assignment: %v", got)
	if got[200] != 5 {
		t.Errorf("no assignment, allow all fallback: got %v, want 5x200", got)
	}
	waitFor(t, "a first report", func() bool { return len(ps.snapshot()) > 0 })
	first := ps.snapshot()[0]
	t.Logf("first report: %v", first.Msg)

	// expect sends resp (when not nil), gives Envoy a moment to apply it,
	// sends n requests for client and checks the answers by status.
	expect := func(what string, resp *rlqspb.RateLimitQuotaResponse, client string, n int, want map[int]int) {
		t.Helper()
		if resp != nil {
			ps.send <- resp
			time.Sleep(time.Second)
		}
		got := burst(t, url, client, n)
		passed += got[200]
		t.Logf("%s: %v", what, got)
		if !maps.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}

	// Token bucket: 3 tokens, 1 more every 30 s.
	expect("token bucket of 3", assign("a", 30*time.Second, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{MaxTokens: 3, TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(30 * time.Second)}}}),
		"a", 10, map[int]int{200: 3, 429: 7})

	// Reports come once per reporting interval; wait for three more.
	n0 := len(ps.snapshot())
	waitFor(t, "three more reports", func() bool { return len(ps.snapshot()) >= n0+3 })
	rs := ps.snapshot()
	for i := 1; i < len(rs); i++ {
		gap := rs[i].At.Sub(rs[i-1].At)
		t.Logf("report %d after %v: %v", i, gap.Round(10*time.Millisecond), rs[i].Msg)
		// The configured reporting_interval is 1s, but Envoy 1.40 reports
		// on a fixed 5 s timer. Counts, not timing: a 1 s interval would
		// show gaps well under 3 s.
		if i >= n0 && gap < 3*time.Second {
			t.Errorf("report %d came %v after the previous one; Envoy 1.40 reports every 5 s", i, gap)
		}
	}

	expect("deny all", assign("a", 30*time.Second, blanket(typev3.RateLimitStrategy_DENY_ALL)), "a", 5, map[int]int{429: 5})
	expect("allow all", assign("a", 30*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)), "a", 5, map[int]int{200: 5})
	// Another bucket (client b) stays unassigned: the allow all fallback.
	expect("bucket b, no assignment", nil, "b", 3, map[int]int{200: 3})

	// TTL expiry: allow all for 2 s, then the expired behaviour (deny all).
	expect("allow all, ttl 2s, fresh", assign("a", 2*time.Second, blanket(typev3.RateLimitStrategy_ALLOW_ALL)), "a", 3, map[int]int{200: 3})
	time.Sleep(3 * time.Second)
	expect("allow all, ttl 2s, expired: the deny all fallback", nil, "a", 3, map[int]int{429: 3})

	// Abandon: back to the no-assignment behaviour (allow all).
	expect("deny all again", assign("a", 30*time.Second, blanket(typev3.RateLimitStrategy_DENY_ALL)), "a", 3, map[int]int{429: 3})
	expect("after abandon: the no-assignment allow all", action("a", &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}),
		"a", 3, map[int]int{200: 3})

	// requests_per_time_unit: Envoy 1.40 ignores it (it logs "not yet
	// supported"), the bucket keeps its previous state, here allow all.
	expect("requests_per_time_unit 2/min (unsupported)", assign("a", 30*time.Second, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 2, TimeUnit: typev3.RateLimitUnit_MINUTE}}}),
		"a", 5, map[int]int{200: 5})

	// Envoy 1.40 counts nothing of its own for the filter (the docs list
	// buckets, assignments, over_limit...): only the RLQS cluster's stats.
	st, err := e.Stats("")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range st {
		if strings.Contains(k, "rate_limit_quota") {
			t.Errorf("Envoy now has filter stat %s = %d: update docs/rlqs.md", k, v)
		}
	}
	if st["cluster.rlqs.upstream_rq_total"] != 1 {
		t.Errorf("RLQS streams opened: %d, want 1 (one per Envoy)", st["cluster.rlqs.upstream_rq_total"])
	}
	ps.mu.Lock()
	streams, reports := ps.streams, len(ps.reports)
	ps.mu.Unlock()
	t.Logf("streams opened: %d, reports: %d, upstream hits: %d", streams, reports, upHits.Load())
	if streams != 1 {
		t.Errorf("the probe server saw %d RLQS streams, want 1", streams)
	}
	// A 429 never reaches the upstream; a 200 always does.
	if hits := upHits.Load(); hits != int64(passed) {
		t.Errorf("the upstream served %d requests, want the %d answered 200", hits, passed)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
