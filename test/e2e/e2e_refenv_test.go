package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// refRules is a rule file in envoyproxy/ratelimit's own format: a limit
// per second and one per minute, by distinct descriptor keys.
const refRules = `domain: ref
descriptors:
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// refEnv is a deployment of envoyproxy/ratelimit's environment, as Istio's
// sample sets it (plus loopback listeners on free ports): rules under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, Redis at a bare host:port.
func refEnv(t *testing.T, redisAddr string, extra ...string) []string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config", "ref.yaml"), refRules)
	return append([]string{
		"USE_STATSD=false", "LOG_LEVEL=info", "LOG_FORMAT=json",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		// Generous, as startServer's --redis-timeout: a slow machine must
		// not turn into failed requests.
		"REDIS_TIMEOUT=5s",
	}, extra...)
}

// startAsRatelimit runs the binary as Istio's sample does, under the name
// /bin/ratelimit with no arguments, configured by env alone.
func startAsRatelimit(t *testing.T, env []string) *server {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binPath, bin); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	return startProcess(t, bin, nil, env, true)
}

// logField returns the string field of the first JSON log line with
// message msg, or "".
func logField(logs, msg, field string) string {
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		v, _ := m[field].(string)
		return v
	}
	return ""
}

// hasLog reports whether a JSON log line has message msg and a variables
// field naming v.
func hasLog(t *testing.T, logs, level, msg, v string) bool {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"`+level+`"`) && strings.Contains(line, msg) && strings.Contains(line, `"`+v+`"`) {
			return true
		}
	}
	return false
}

// TestReferenceEnv: /bin/ratelimit with no arguments and only
// envoyproxy/ratelimit's variables serves the rules of its runtime
// directory on its Redis, answers /healthcheck, logs each mapping and warns
// about RUNTIME_WATCH_ROOT.
func TestReferenceEnv(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	s := startAsRatelimit(t, refEnv(t, r.Addr, "CACHE_KEY_PREFIX=refprefix:",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_PATH=/prom"))

	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := s.ask("ref", desc("slow", "x")).OverallCode; got != want {
			t.Fatalf("request %d: %s, want %s", i+1, got, want)
		}
	}
	keys, err := r.Client(t).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	if len(keys) == 0 {
		t.Fatal("no key on the Redis of REDIS_URL")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "refprefix:") {
			t.Errorf("key %q lacks CACHE_KEY_PREFIX", k)
		}
	}
	if code, body := s.get("/healthcheck"); code != http.StatusOK {
		t.Errorf("/healthcheck: %d %s", code, body)
	}
	logs := s.logs.String()
	if addr := logField(logs, "serving metrics", "metrics_addr"); addr == "" {
		t.Errorf("no metrics listener logged; logs:\n%s", logs)
	} else if code, body := getURL("http://" + addr + "/prom"); code != http.StatusOK || !strings.Contains(body, "envoy_rls_build_info") {
		t.Errorf("PROMETHEUS_ADDR/PROMETHEUS_PATH: %d %.200s", code, body)
	}
	for _, v := range []string{"PROMETHEUS_ADDR", "REDIS_URL", "RUNTIME_ROOT", "PORT", "GRPC_PORT", "LOG_LEVEL", "CACHE_KEY_PREFIX", "REDIS_TIMEOUT"} {
		if !hasLog(t, logs, "info", "envoyproxy/ratelimit setting mapped", v) {
			t.Errorf("no mapping line for %s; logs:\n%s", v, logs)
		}
	}
	if !hasLog(t, logs, "warn", "not supported", "RUNTIME_WATCH_ROOT") {
		t.Errorf("no warning for RUNTIME_WATCH_ROOT; logs:\n%s", logs)
	}
	if !hasLog(t, logs, "info", "its switch is off", "USE_STATSD") {
		t.Errorf("USE_STATSD=false not logged as off; logs:\n%s", logs)
	}
}

// TestReferenceEnvOursWin: with both set, ENVOY_RLS_REDIS_URL wins over
// REDIS_URL, and that is logged.
func TestReferenceEnvOursWin(t *testing.T) {
	t.Parallel()
	ref, ours := redistest.Standalone(t), redistest.Standalone(t)
	s := startAsRatelimit(t, refEnv(t, ref.Addr, "ENVOY_RLS_REDIS_URL=redis://"+ours.Addr))
	if got := s.ask("ref", desc("slow", "x")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("request: %s, want OK", got)
	}
	if n, m := redistest.DBSize(t, ref.Client(t)), redistest.DBSize(t, ours.Client(t)); n != 0 || m == 0 {
		t.Errorf("keys: %d on REDIS_URL's Redis, %d on ENVOY_RLS_REDIS_URL's; want none and some", n, m)
	}
	if !hasLog(t, s.logs.String(), "info", "overridden", "REDIS_URL") {
		t.Errorf("no line saying REDIS_URL was overridden; logs:\n%s", s.logs)
	}
}

// TestReferenceEnvPerSecond: with REDIS_PERSECOND, limits of a second go
// to the per-second Redis and only there; the others to REDIS_URL's.
func TestReferenceEnvPerSecond(t *testing.T) {
	t.Parallel()
	main, sec := redistest.Standalone(t), redistest.Standalone(t)
	s := startAsRatelimit(t, refEnv(t, main.Addr,
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_TYPE=single", "REDIS_PERSECOND_URL="+sec.Addr))
	mainC, secC := main.Client(t), sec.Client(t)
	if got := s.ask("ref", desc("fast", "x")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("per-second request: %s, want OK", got)
	}
	if n, m := counterKeys(t, mainC), counterKeys(t, secC); n != 0 || m == 0 {
		t.Fatalf("after a per-second limit: %d keys on the main Redis, %d on the per-second one; want none and some", n, m)
	}
	before := counterKeys(t, secC)
	if got := s.ask("ref", desc("slow", "x")).OverallCode; got != pb.RateLimitResponse_OK {
		t.Fatalf("per-minute request: %s, want OK", got)
	}
	if n, m := counterKeys(t, mainC), counterKeys(t, secC); n == 0 || m != before {
		t.Errorf("after a per-minute limit: %d keys on the main Redis, %d on the per-second one; want some and still %d", n, m, before)
	}
	if !hasLog(t, s.logs.String(), "info", "envoyproxy/ratelimit setting mapped", "REDIS_PERSECOND_URL") {
		t.Errorf("no mapping line for REDIS_PERSECOND_URL; logs:\n%s", s.logs)
	}
}

// metaKey is the deployment's record of its counter-hash count (no key
// prefix), which a replica's readiness writes on each Redis it uses
// (docs/redis.md, "Sizing counter hashes").
const metaKey = "envoy-rls:layout:r3:{meta}"

// counterKeys is the number of keys on c but the deployment's record
// (metaKey).
func counterKeys(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	n := redistest.DBSize(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	has, err := c.Exists(ctx, metaKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n - has
}
