package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// sendSecret makes the server handle secret as a descriptor value on every
// path a request can take: admitted, denied, unmatched, unknown domain,
// rejected as invalid, and through /json.
func sendSecret(t *testing.T, s *server, secret string) {
	t.Helper()
	for range 6 {
		s.ask("shop", desc("client", secret))
	}
	s.ask("shop", desc("nomatch", secret), desc("user", secret))
	s.ask("unknown", desc("client", secret))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
		desc("client", secret, "", secret),
	}}); err == nil {
		t.Fatalf("request with an empty key accepted")
	}
	body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":%q}]}]}`, secret)
	if status, resp := s.post("/json", body); status != 200 && status != 429 {
		t.Fatalf("/json: %d %s", status, resp)
	}
}

// TestLogs checks that logs are JSON lines and that descriptor values never
// appear at info level or above, also when debug logging is on.
func TestLogs(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"info", "debug"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			s := startShop(t, "--log-level", level)
			secret := fmt.Sprintf("secret-%s-%d", level, time.Now().UnixNano())
			sendSecret(t, s, secret)
			s.stop()

			lines := jsonLines(t, s.logs.String())
			var serving *logLine
			for i, l := range lines {
				if l.Level == "" || l.Msg == "" || l.raw["ts"] == nil {
					t.Errorf("log line %d lacks level, msg or ts: %v", i, l.raw)
				}
				if l.Msg == "envoy-rls serving" {
					serving = &lines[i]
				}
				if l.Level != "debug" && strings.Contains(fmt.Sprint(l.raw), secret) {
					t.Errorf("descriptor value logged at %s: %v", l.Level, l.raw)
				}
				if level == "info" && l.Level == "debug" {
					t.Errorf("debug line with --log-level info: %v", l.raw)
				}
			}
			if serving == nil {
				t.Fatalf("no \"envoy-rls serving\" line")
			}
			for _, k := range []string{"version", "grpc_addr", "http_addr", "backend", "default_algorithm"} {
				if serving.raw[k] == nil {
					t.Errorf("\"envoy-rls serving\" lacks %q: %v", k, serving.raw)
				}
			}
		})
	}
}

// TestLogsRedisDown starts on an unreachable Redis: the Redis client's own
// complaints (dial failures) must come out as JSON lines too, and carry no
// descriptor value.
func TestLogsRedisDown(t *testing.T) {
	t.Parallel()
	s := startServer(t, serveOpts{
		ConfigDir:   shopDir(t),
		Args:        []string{"--redis-url", "redis://" + freeAddr(t), "--redis-timeout=50ms"},
		NoReadyWait: true,
	})
	secret := fmt.Sprintf("secret-down-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", secret)}})
	if err == nil {
		t.Logf("request answered without Redis (a failure mode)")
	}
	s.stop()
	for _, l := range jsonLines(t, s.logs.String()) {
		if l.Level != "debug" && strings.Contains(fmt.Sprint(l.raw), secret) {
			t.Errorf("descriptor value logged at %s: %v", l.Level, l.raw)
		}
	}
}
