package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// Rule files of the drop-in trial, each as a ConfigMap key (no extension).
const (
	// dropInLimits is the rule: 5 a second.
	dropInLimits = `domain: trial
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 5}
`
	// dropInZero has a rate limit without requests_per_unit (on line 5),
	// which envoyproxy/ratelimit reads as 0.
	dropInZero = `domain: zero
descriptors:
  - key: client
    rate_limit:
      unit: hour
`
	// dropInTeam lives in a subdirectory.
	dropInTeam = `domain: team
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 100}
`
)

// istioSampleDir lays out rules as a Kubernetes ConfigMap mounted at
// root/ratelimit/config: the keys are symlinks into "..data", itself a
// symlink to the timestamped directory holding the files. A subdirectory
// holds one more file, and a dotfile holds what is not a rule file (read,
// it would stop the start).
func istioSampleDir(t *testing.T) (root, config string) {
	t.Helper()
	root = t.TempDir()
	config = filepath.Join(root, "ratelimit", "config")
	data := filepath.Join(config, "..2026_12_01_00_00_00.000000001")
	for _, d := range []string{data, filepath.Join(config, "team")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(data, "limits"), dropInLimits)
	writeFile(t, filepath.Join(data, "zero"), dropInZero)
	writeFile(t, filepath.Join(config, "team", "rules.conf"), dropInTeam)
	writeFile(t, filepath.Join(config, ".notes"), "not: [a rule file\n")
	if err := os.Symlink(filepath.Base(data), filepath.Join(config, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"limits", "zero"} {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(config, key)); err != nil {
			t.Fatal(err)
		}
	}
	return root, config
}

// istioSampleEnv is Istio's sample Deployment's environment, with free
// ports (the sample's 8080, 8081 and 6070 may be taken here).
func istioSampleEnv(root, redisAddr string, extra ...string) []string {
	return append([]string{
		"LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr, "USE_STATSD=false",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"HOST=::", "GRPC_HOST=::", "PORT=0", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"LOG_FORMAT=json", "REDIS_TIMEOUT=5s",
	}, extra...)
}

// startIstioSample runs the binary as /bin/ratelimit with no arguments on
// the sample's environment. HOST=:: listens on every address; the test
// talks to it over IPv6 loopback.
func startIstioSample(t *testing.T, env []string) *server {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binPath, bin); err != nil {
		t.Fatal(err)
	}
	s := startProcess(t, bin, nil, env, false)
	s.GRPCAddr = strings.Replace(s.GRPCAddr, "[::]", "[::1]", 1)
	s.HTTPAddr = strings.Replace(s.HTTPAddr, "[::]", "[::1]", 1)
	s.awaitReadyz(t, "the sample's rules loaded", 200, "")
	return s
}

// TestDropInIstioSample: on Istio's sample environment the binary loads
// the rules as envoyproxy/ratelimit does (ConfigMap keys without an
// extension, a subdirectory, the dotfile skipped), reads a missing
// requests_per_unit as 0 with a warning naming the file and line, decides
// with fixed windows, says so at start, and logs each decision at debug.
func TestDropInIstioSample(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	root, config := istioSampleDir(t)
	s := startIstioSample(t, istioSampleEnv(root, r.Addr))

	if got := s.ask("team", desc("client", "a")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("domain team (from team/rules.conf): %s, want OK", got)
	}
	if got := s.ask("zero", desc("client", "a")).GetOverallCode(); got != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("domain zero (requests_per_unit missing, read as 0): %s, want OVER_LIMIT", got)
	}
	if admitted := trialAdmitted(t, s); admitted != 10 {
		t.Errorf("%d of the trial's 10 requests admitted, want all (fixed windows)", admitted)
	}

	logs := jsonLines(t, s.logs.String())
	start := findLog(logs, "drop-in mode: envoyproxy/ratelimit's defaults")
	if start == nil || start.raw["default_algorithm"] != "fixed_window" || !strings.Contains(fmt.Sprint(start.raw["algorithms"]), "--default-algorithm") ||
		start.raw["reason"] != "started as ratelimit" {
		t.Errorf("start-up line %v, want drop-in mode started as ratelimit, fixed_window, and how to choose another algorithm", start)
	}
	warn := findLog(logs, "rule file accepted with a warning")
	if want := filepath.Join(config, "zero") + ":5: descriptors[0].rate_limit.requests_per_unit: missing, read as 0"; warn == nil || warn.Level != "warn" ||
		!strings.HasPrefix(fmt.Sprint(warn.raw["warning"]), want) {
		t.Errorf("warning %v, want one starting %q", warn, want)
	}
	decision := findLog(logs, "decision")
	if decision == nil || decision.raw["domain"] == nil {
		t.Fatalf("no debug decision line; logs:\n%s", s.logs)
	}
	descs, _ := json.Marshal(decision.raw["descriptors"])
	if want := `[{"code":"OK","entries":["client=a"],"rule":"` + filepath.Join(config, "team", "rules.conf") + `:3"}]`; string(descs) != want {
		t.Errorf("first decision's descriptors %s, want %s", descs, want)
	}
	if !hasLog(t, s.logs.String(), "info", "envoyproxy/ratelimit setting mapped", "RUNTIME_IGNOREDOTFILES") {
		t.Errorf("no line saying RUNTIME_IGNOREDOTFILES is used; logs:\n%s", s.logs)
	}
	if h := s.health("ratelimit"); h.String() != "SERVING" {
		t.Errorf("gRPC health of service ratelimit: %v, want SERVING", h)
	}
}

// findLog returns the first log line with message msg, or nil.
func findLog(lines []logLine, msg string) *logLine {
	for i := range lines {
		if lines[i].Msg == msg {
			return &lines[i]
		}
	}
	return nil
}

// trialAdmitted runs the trial against domain trial (5 a second):
// five requests at about .85 s into a second, five more at about .05 s
// into the next, and returns how many were admitted. The instants are
// picked by reading the clock; a batch that strays across a second
// boundary (a stalled machine) makes the attempt void, and it is run
// again with a fresh client, at most five times. Only counts are checked.
func trialAdmitted(t *testing.T, s *server) int {
	t.Helper()
	for attempt := range 5 {
		client := "trial-" + strconv.Itoa(attempt)
		sleepUntilFraction(850 * time.Millisecond)
		first, ok := batch(s, client)
		if !ok {
			continue
		}
		sleepUntilFraction(50 * time.Millisecond)
		second, ok := batch(s, client)
		if !ok {
			continue
		}
		return first + second
	}
	t.Fatal("every attempt of the trial strayed across a second boundary")
	return 0
}

// sleepUntilFraction sleeps until the wall clock is at frac into a second
// (the next such moment).
func sleepUntilFraction(frac time.Duration) {
	now := time.Now()
	target := now.Truncate(time.Second).Add(frac)
	if !target.After(now) {
		target = target.Add(time.Second)
	}
	time.Sleep(time.Until(target))
}

// batch sends five requests for client and returns how many were
// admitted; ok is false when they did not all happen within one second.
func batch(s *server, client string) (admitted int, ok bool) {
	start := time.Now().Truncate(time.Second)
	for range 5 {
		if s.ask("trial", desc("client", client)).GetOverallCode() == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	return admitted, time.Now().Truncate(time.Second).Equal(start)
}

// TestDropInValidate: validate reads what serve reads: envoyproxy/ratelimit's
// RUNTIME_* directory (not the image's own), its layout, and
// MERGE_DOMAIN_CONFIG.
func TestDropInValidate(t *testing.T) {
	t.Parallel()
	root, config := istioSampleDir(t)
	env := istioSampleEnv(root, "127.0.0.1:1")
	stdout, stderr, code := runCLI(t, env, "validate")
	if code != 0 || !strings.Contains(stdout, "3 domains, 3 rules, 3 limits OK") {
		t.Errorf("validate: exit %d, stdout %q, stderr %q; want the sample's 3 domains", code, stdout, stderr)
	}
	if want := filepath.Join(config, "zero") + ":5: descriptors[0].rate_limit.requests_per_unit: missing, read as 0"; !strings.Contains(stderr, want) {
		t.Errorf("validate stderr %q, want the warning %q", stderr, want)
	}

	// A second file for domain trial: refused unless MERGE_DOMAIN_CONFIG.
	writeFile(t, filepath.Join(config, "team", "more"), "domain: trial\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if _, stderr, code := runCLI(t, env, "validate"); code != 1 || !strings.Contains(stderr, `duplicate domain "trial"`) {
		t.Errorf("validate, domain in two files: exit %d, stderr %q; want 1 and the duplicate named", code, stderr)
	}
	if stdout, stderr, code := runCLI(t, append(env, "MERGE_DOMAIN_CONFIG=true"), "validate"); code != 0 || !strings.Contains(stdout, "3 domains, 4 rules") {
		t.Errorf("validate with MERGE_DOMAIN_CONFIG=true: exit %d, stdout %q, stderr %q; want the merged domains", code, stdout, stderr)
	}
}
