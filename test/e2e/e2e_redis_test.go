package e2e

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// taggedRules co-locate one user's two limits with hash_tag. Periods are
// long because a key disappears when its TTL (the time until its state
// equals "no key") ends, and the tests look for the keys.
const taggedRules = `
domain: tagged
descriptors:
  - key: user_id
    hash_tag: user_id
    rate_limits:
      - {name: per_hour, unit: hour, requests_per_unit: 20, algorithm: gcra}
      - {name: per_day, unit: day, requests_per_unit: 1000, algorithm: sliding_window}
`

// startOnRedis starts a fresh redis-server and envoy-rls on it.
func startOnRedis(t *testing.T, rules map[string]string, args ...string) (*server, *redistest.Server) {
	t.Helper()
	r := redistest.Standalone(t)
	s := startServer(t, serveOpts{
		ConfigDir: rulesDir(t, rules),
		Args:      append([]string{"--redis-url", "redis://" + r.Addr}, args...),
	})
	return s, r
}

// hashTag returns what Redis Cluster hashes for key: the bytes between the
// first '{' and the first '}' after it, or "" when there is no such tag.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

// TestRedisBurst runs the burst scenario on Redis over gRPC, then inspects
// the keys it wrote: versioned prefix, intact hash tag holding the limit's
// identity, client-supplied parts escaped, a TTL on every key.
func TestRedisBurst(t *testing.T) {
	t.Parallel()
	s, r := startOnRedis(t, map[string]string{"shop.yaml": shopRules, "tagged.yaml": taggedRules})
	if !strings.Contains(s.logs.String(), `"backend":"redis"`) {
		t.Errorf("serving line does not name the redis backend")
	}
	runBurst(t, s, "redis")

	// A value that would end the hash tag early if it were not escaped.
	if st := onlyStatus(t, s.ask("shop", desc("user", "a}b{c:d"))); st.GetCode() != pb.RateLimitResponse_OK {
		t.Fatalf("user=a}b{c:d: %v", st)
	}
	// hash_tag: both of alice's limits share one tag.
	if got := s.ask("tagged", desc("user_id", "alice")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Fatalf("tagged user: %v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rc := r.Client(t)
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{} // key → tag
	for _, k := range keys {
		if k == metaKey {
			// The deployment's record of its counter-hash count, which
			// readiness writes (docs/redis.md): no counter.
			continue
		}
		if !strings.HasPrefix(k, "r3{") {
			t.Errorf("key %q lacks the r3{ prefix", k)
			continue
		}
		tags[k] = hashTag(k)
		ttl, err := rc.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 3*24*time.Hour {
			t.Errorf("key %q: TTL %v, want a positive TTL bounded by the limit's periods", k, ttl)
		}
	}
	// The default tag is the limit's whole identity.
	for _, want := range []string{
		"shop:client:redis:t2s0",
		"shop:user:redis:s1uo0/30",
		"shop:user:redis-fresh:s1uo0/30",
		"shop:plan:free:s1e0/30",
		"shop:user:a%7Db%7Bc%3Ad:s1uo0/30",
	} {
		if !hasTag(tags, want) {
			t.Errorf("no key with hash tag {%s}; keys: %v", want, keys)
		}
	}
	// A hash-tagged key's tag is the domain and its tagged value's
	// bucket: alice's two limits share it.
	var alice []string
	aliceTags := map[string]bool{}
	for k, tag := range tags {
		if strings.HasPrefix(tag, "tagged:#") && strings.Contains(k, "}user_id:alice:#:") {
			alice = append(alice, k)
			aliceTags[tag] = true
		}
	}
	if len(alice) != 2 || len(aliceTags) != 1 {
		t.Errorf("keys of alice's tagged limits: %v in tags %v, want one per limit (2) with one tag; all keys: %v", alice, aliceTags, keys)
	}
	s.stop()
}

func hasTag(tags map[string]string, want string) bool {
	for _, tag := range tags {
		if tag == want {
			return true
		}
	}
	return false
}

// TestRedisShutdownInFlight holds a ShouldRateLimit call inside a hung
// Redis while the server shuts down: the call completes once Redis answers,
// after the listener has closed, and the process then exits 0.
func TestRedisShutdownInFlight(t *testing.T) {
	t.Parallel()
	s, r := startOnRedis(t, map[string]string{"shop.yaml": shopRules},
		"--redis-timeout=20s", "--shutdown-delay=1s", "--shutdown-timeout=30s")
	s.ask("shop", desc("client", "warm")) // connection and script are ready

	r.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			r.Resume(t)
		}
	}()
	type result struct {
		resp *pb.RateLimitResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", "in-flight")}})
		done <- result{resp, err}
	}()
	// The call was sent before SIGTERM and the delay keeps accepting calls,
	// so it is in the server by the time the listener closes.
	s.signal(syscall.SIGTERM)
	eventually.True(t, "gRPC listener closes", func() (bool, string) { return listenerClosed(s.GRPCAddr) })
	select {
	case res := <-done:
		t.Fatalf("call finished while Redis was paused: %v, %v", res.resp, res.err)
	case <-s.done:
		t.Fatalf("envoy-rls exited with a call in flight; logs:\n%s", s.logs)
	default:
	}
	r.Resume(t)
	resumed = true
	res := <-done
	if res.err != nil || res.resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Errorf("in-flight call: %v, %v; want OK", res.resp, res.err)
	}
	if code := s.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestRedisReadiness stops Redis under a running server: /readyz reports the
// backend, and recovers without a restart when Redis is back.
func TestRedisReadiness(t *testing.T) {
	t.Parallel()
	s, r := startOnRedis(t, map[string]string{"shop.yaml": shopRules})
	r.Stop(t)
	s.awaitReadyz(t, "/readyz fails without Redis", http.StatusServiceUnavailable, "backend")
	r.Start(t)
	s.awaitReadyz(t, "/readyz recovers with Redis", http.StatusOK, "")
	eventually.True(t, "requests are served again", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		resp, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", "back")}})
		if err != nil {
			return false, err.Error()
		}
		return resp.GetOverallCode() == pb.RateLimitResponse_OK, resp.String()
	})
	s.stop()
}

// TestRedisScriptFlushAndRestart empties Redis's script cache, then restarts
// Redis (losing data and scripts) between requests: no request fails, the
// script is reloaded transparently.
//
// The deny cache is off here: it would, by design, keep denying the client
// this test exhausted until its window resets, although the restarted Redis
// forgot the count (it never admits what Redis denied, and a restart is no
// reason to hand out quota again). This test is about the script cache.
func TestRedisScriptFlushAndRestart(t *testing.T) {
	t.Parallel()
	s, r := startOnRedis(t, map[string]string{"shop.yaml": shopRules}, "--redis-deny-cache-entries=0")
	s.ask("shop", desc("client", "flush"))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := r.Client(t).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The count survived: only the script was flushed.
	exhaustClient(t, s, "flush", 1)

	r.Restart(t)
	// A restarted server without persistence is empty: a fresh window.
	exhaustClient(t, s, "flush", 0)
	s.stop()
}
