package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/lease"
	"github.com/envoy-rls/envoy-rls/pkg/override"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// rulesFile is the test's one rule: limit requests of each user per hour.
func rulesFile(limit int) string {
	return fmt.Sprintf("domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit)
}

// testConfig is a Config as the serve command's defaults would give, on
// loopback port 0, over the rules in dir and the backend bc.
func testConfig(dir string, bc BackendConfig) Config {
	opts := rules.Options{DefaultAlgorithm: algo.FixedWindow, SlidingLogCap: algo.DefaultSlidingLogCap, MaxDelay: rules.DefaultMaxDelay}
	return Config{
		Version: "app-test",
		Rules:   RulesConfig{Options: opts, Dir: dir},
		Backend: bc,
		Service: ServiceConfig{MaxHeld: rls.DefaultMaxHeld, Service: rls.Config{
			DefaultAlgorithm: algo.FixedWindow, Limits: rls.DefaultRequestLimits, MaxRequestCost: algo.DefaultMaxCost,
			SlidingLogCap: algo.DefaultSlidingLogCap, Overrides: rls.OverridesAllow,
		}},
		Overrides: OverridesConfig{Refresh: override.DefaultRefresh, MaxTTL: override.DefaultMaxTTL},
		Servers: ServersConfig{
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0",
			MetricsAddr: "127.0.0.1:0", MetricsPath: "/metrics",
			HTTP:            HTTPLimits{ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10, MaxConnections: 64},
			ShutdownTimeout: 10 * time.Second,
		},
	}
}

// TestAppServesReloadsAndStops assembles the whole serve command in this
// process, on the in-process store and on a real Redis: it answers over
// gRPC and HTTP, takes a rule change, and at shutdown Run returns only
// after every goroutine the app started has ended.
func TestAppServesReloadsAndStops(t *testing.T) {
	redisAddr := redistest.SharedStandalone(t).Addr
	tests := []struct {
		name    string
		backend func(t *testing.T) BackendConfig
	}{
		{"memory", func(*testing.T) BackendConfig { return BackendConfig{Stack: stack.Config{MemstoreMaxKeys: 1000}} }},
		{"redis", func(t *testing.T) BackendConfig {
			opts, err := redisclient.ParseURL("redis://" + redisAddr)
			if err != nil {
				t.Fatal(err)
			}
			return BackendConfig{Redis: opts, Stack: stack.Config{
				Timeout: time.Second, FailureMode: failover.ModeError, ExpectedReplicas: 1,
				Breaker:          failover.BreakerOptions{Failures: 100, FailureRatio: 0.5, Cooldown: failover.DefaultCooldown, Probes: failover.DefaultProbes},
				DenyCacheEntries: 100, MaxCallCost: algo.DefaultMaxCost, KeyPrefix: redistest.KeyPrefix(t),
				Lease: lease.Options{TTL: lease.DefaultTTL, HotRPS: lease.DefaultHotRPS, MaxFraction: lease.DefaultMaxFraction},
			}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			runApp(t, tt.backend(t))
			goleak.VerifyNone(t, ignore)
		})
	}
}

// runApp starts the app, checks it, stops it and waits for Run.
func runApp(t *testing.T, bc BackendConfig) {
	t.Helper()
	dir := t.TempDir()
	writeRules(t, dir, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, testConfig(dir, bc))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	addrs := a.Addrs()
	hc, conn := whenReady(t, a)
	defer hc.CloseIdleConnections()
	rl := pb.NewRateLimitServiceClient(conn)
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, rl, "alice"); got.GetOverallCode() != want {
			t.Fatalf("gRPC request %d: %v, want %v", i, got.GetOverallCode(), want)
		}
	}
	checkHTTP(t, hc, addrs)

	// A rule change applies without a restart: a new user gets the new
	// limit of 5, so 4 remain after its first request.
	writeRules(t, dir, 5)
	n := 0
	eventually.True(t, "the reloaded limit", func() (bool, string) {
		n++
		r := ask(t, rl, fmt.Sprintf("user-%d", n)).GetStatuses()[0]
		return r.GetLimitRemaining() == 4, fmt.Sprintf("remaining %d", r.GetLimitRemaining())
	})
	conn.Close()

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// whenReady waits until a's readiness passes and returns an HTTP client
// and a gRPC connection to it; the caller closes both.
func whenReady(t *testing.T, a *App) (*http.Client, *grpc.ClientConn) {
	t.Helper()
	addrs := a.Addrs()
	hc := &http.Client{Transport: &http.Transport{}}
	eventually.True(t, "ready", func() (bool, string) {
		code, body := get(hc, "http://"+addrs.HTTP+"/readyz")
		return code == http.StatusOK, body
	})
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return hc, conn
}

// checkHTTP asks the HTTP listener's /json for alice, who is over her
// limit, and the debug listener for the loaded rules.
func checkHTTP(t *testing.T, hc *http.Client, addrs Addrs) {
	t.Helper()
	body := `{"domain":"app","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`
	resp, err := hc.Post("http://"+addrs.HTTP+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "OVER_LIMIT") {
		t.Errorf("/json: %d %s, want 429 OVER_LIMIT", resp.StatusCode, b)
	}
	if code, cfg := get(hc, "http://"+addrs.Debug+"/debug/config"); code != http.StatusOK || !strings.Contains(cfg, `"domain": "app"`) || !strings.Contains(cfg, `"limits"`) {
		t.Errorf("/debug/config: %d %s, want the rules and their limits", code, cfg)
	}
	// The console's sketch is fed: alice, denied over gRPC and /json,
	// heads the denied list.
	var top struct {
		Limits []struct {
			Denied    uint64 `json:"denied"`
			TopDenied []struct {
				Value string `json:"value"`
				Count uint64 `json:"count"`
			} `json:"top_denied"`
		} `json:"limits"`
	}
	code, page := get(hc, "http://"+addrs.Debug+"/debug/top")
	if err := json.Unmarshal([]byte(page), &top); code != http.StatusOK || err != nil || len(top.Limits) != 1 ||
		len(top.Limits[0].TopDenied) == 0 || top.Limits[0].TopDenied[0].Value != "user=alice" || top.Limits[0].TopDenied[0].Count != 2 {
		t.Errorf("/debug/top: %d %s, want user=alice denied twice", code, page)
	}
	if code, _ := get(hc, "http://"+addrs.Debug+"/console/"); code != http.StatusOK {
		t.Errorf("/console/: HTTP %d", code)
	}
}

// TestConsoleOff: with the console off, the debug listener serves neither
// the page nor the sketch, and the service feeds none.
func TestConsoleOff(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := testConfig(dir, BackendConfig{Stack: stack.Config{MemstoreMaxKeys: 1000}})
	cfg.Console.Off = true
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	if a.console != nil || a.svc == nil {
		t.Error("the console's state was built while off")
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/console/", "/debug/top"} {
		eventually.True(t, path+" answers 404", func() (bool, string) {
			code, body := get(hc, "http://"+a.Addrs().Debug+path)
			return code == http.StatusNotFound, body
		})
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

func ask(t *testing.T, rl pb.RateLimitServiceClient, user string) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rl.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "app", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
	}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func get(hc *http.Client, url string) (int, string) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeRules replaces the rule file, renaming over it so the watcher
// never reads half a file.
func writeRules(t *testing.T, dir string, limit int) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(tmp, []byte(rulesFile(limit)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
}

// TestOverrideKeyUnchanged: the override hash keeps the name replicas of
// earlier versions use, now that redisalgo names it.
func TestOverrideKeyUnchanged(t *testing.T) {
	if got := redisalgo.OverrideKey("p:"); got != "p:"+override.DefaultRedisKey {
		t.Errorf("OverrideKey(p:) = %q, want %q", got, "p:"+override.DefaultRedisKey)
	}
}

// TestNewFailureReleasesEverything: when New fails at its last step (a
// listener address in use), it names the setting and releases what it
// built before (the Redis client, the stack, the other listeners).
func TestNewFailureReleasesEverything(t *testing.T) {
	redisAddr := redistest.SharedStandalone(t).Addr
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ignore := goleak.IgnoreCurrent()
	opts, err := redisclient.ParseURL("redis://" + redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRules(t, dir, 2)
	cfg := testConfig(dir, BackendConfig{Redis: opts, Stack: stack.Config{Timeout: time.Second, ExpectedReplicas: 1,
		Breaker:   failover.BreakerOptions{Failures: 100, Cooldown: failover.DefaultCooldown, Probes: failover.DefaultProbes},
		KeyPrefix: redistest.KeyPrefix(t), MaxCallCost: algo.DefaultMaxCost,
		// A lease layer runs a sweeper: left behind, goleak sees it.
		Lease: lease.Options{TTL: lease.DefaultTTL, HotRPS: lease.DefaultHotRPS, MaxFraction: lease.DefaultMaxFraction}}})
	// The gRPC listener opens before the debug one; its port must be free
	// again after the failure.
	grpcAddr := freeAddr(t)
	cfg.Servers.GRPCAddr, cfg.Servers.DebugAddr = grpcAddr, busy.Addr().String()
	if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--debug-addr") {
		t.Fatalf("New with the debug address in use: %v, want an error naming --debug-addr", err)
	}
	goleak.VerifyNone(t, ignore)
	l, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("the gRPC address after the failed New: %v, want it released", err)
	}
	l.Close()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestComponentStoppingKeepsServing: a component whose Run returns early,
// with an error, does not end serving (Run's comment says why): the app
// stays ready and answers, and Run returns that error with the rest once
// its context ends, every goroutine joined.
func TestComponentStoppingKeepsServing(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	dir := t.TempDir()
	writeRules(t, dir, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, testConfig(dir, BackendConfig{Stack: stack.Config{MemstoreMaxKeys: 1000}}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	failed := errors.New("the component failed")
	stopped := make(chan struct{})
	a.runs = append(a.runs, func(context.Context) error { close(stopped); return failed })
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-stopped
	hc, conn := whenReady(t, a)
	if got := ask(t, pb.NewRateLimitServiceClient(conn), "bob"); got.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Errorf("after a component stopped: %v, want OK", got.GetOverallCode())
	}
	conn.Close()
	hc.CloseIdleConnections()
	select {
	case err := <-done:
		t.Fatalf("Run returned while serving: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, failed) {
		t.Errorf("Run: %v, want the component's error", err)
	}
	goleak.VerifyNone(t, ignore)
}
