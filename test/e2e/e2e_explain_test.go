package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const explainRules = `domain: shop
descriptors:
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 10, algorithm: fixed_window}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket}
`

// explainReport is the part of `envoy-rls explain --json` the tests read.
type explainReport struct {
	Domain      string
	Source      string
	Live        bool
	Descriptors []struct {
		Rule *struct {
			ID, Path, File string
			Line           int
		}
		NoMatch string `json:"no_match"`
		Levels  []struct {
			Candidates []struct {
				Kind, Key, Value string
				Line             int
				Chosen           bool
			}
		}
		Limits []struct {
			Name, Algorithm, Key, Field string
			Slot                        int
			RequestsPerUnit             uint32 `json:"requests_per_unit"`
			Effective                   struct {
				Limit  int64
				Source string
			}
			State *struct {
				Exists    bool
				Remaining int64
				TTLMS     float64 `json:"ttl_ms"`
			}
		}
	}
}

func explainJSON(t *testing.T, args ...string) explainReport {
	t.Helper()
	out, errOut, code := runCLI(t, nil, append([]string{"explain", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("explain %v: exit %d: %s", args, code, errOut)
	}
	var rep explainReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("explain --json: %v\n%s", err, out)
	}
	return rep
}

// TestExplainOffline: `envoy-rls explain --config-dir` names the matched
// rule with its file and line, the descriptor it beat, and each limit's
// Redis key and slot, with the deployment's key prefix (a fixed window's:
// its window's hash and its field there); in text or JSON.
func TestExplainOffline(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"shop.yaml": explainRules})
	rep := explainJSON(t, "--config-dir", dir, "--redis-key-prefix", "prod:", "--domain", "shop", "-d", "user=vip", "-d", "user=bob,path=/x", "-d", "nope=1", "-d", "user=carol")
	if rep.Live || rep.Domain != "shop" || len(rep.Descriptors) != 4 {
		t.Fatalf("report %+v", rep)
	}
	vip := rep.Descriptors[0]
	if vip.Rule == nil || vip.Rule.Path != "shop.user_vip" || !strings.HasSuffix(vip.Rule.File, "shop.yaml") || vip.Rule.Line != 3 {
		t.Fatalf("vip's rule %+v, want shop.user_vip at shop.yaml:3", vip.Rule)
	}
	if c := vip.Levels[0].Candidates; len(c) != 2 || c[0].Kind != "exact" || !c[0].Chosen || c[1].Kind != "key" || c[1].Line != 6 {
		t.Errorf("vip's candidates %+v, want exact chosen over the key at line 6", c)
	}
	l := vip.Limits[0]
	if l.Algorithm != "sliding_window" || l.Effective.Limit != 100 || l.Effective.Source != "config" || l.Key != "prod:r3{shop:user:vip:s1o/30}" || l.Slot < 0 || l.State != nil {
		t.Errorf("vip's limit %+v", l)
	}
	if bob := rep.Descriptors[1]; bob.Rule == nil || bob.Rule.Path != "shop.user.path" || bob.Limits[0].Algorithm != "token_bucket" {
		t.Errorf("bob %+v", bob)
	}
	if nope := rep.Descriptors[2]; nope.Rule != nil || !strings.Contains(nope.NoMatch, "no descriptor matches") {
		t.Errorf("nope %+v", nope)
	}
	// A fixed window of an hour (f2s0): the hash of the window holding
	// now, in one of the deployment's 16 buckets, and the field there.
	fixedKey := regexp.MustCompile(`^prod:r3\{shop:f2s0:[0-9a-f]\}[0-9a-z]{4}$`)
	if l := rep.Descriptors[3].Limits; len(l) != 1 || l[0].Name != "per_user" || !fixedKey.MatchString(l[0].Key) || l[0].Field != "user:carol" {
		t.Errorf("carol's limits %+v, want per_user's hash and field user:carol", l)
	}
	if l := rep.Descriptors[0].Limits[0]; l.Field != "" {
		t.Errorf("vip's sliding window has field %q, want none", l.Field)
	}
	out, _, code := runCLI(t, nil, "explain", "--config-dir", dir, "--domain", "shop", "-d", "user=vip", "-d", "user=carol")
	for _, want := range []string{"* chosen exact    user=vip", "beaten key      user", "redis key: r3{shop:user:vip:s1o/30} (slot "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("explain text (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if !regexp.MustCompile(`\n    redis key: r3\{shop:f2s0:[0-9a-f]\}[0-9a-z]{4} field user:carol \(slot \d+\)\n`).MatchString(out) {
		t.Errorf("explain text lacks carol's hash and field:\n%s", out)
	}
	for _, bad := range [][]string{{"--config-dir", dir, "-d", "user=a"}, {"--config-dir", dir, "--domain", "shop"}, {"--config-dir", t.TempDir() + "/none", "--domain", "shop", "-d", "a=b"}} {
		if _, errOut, code := runCLI(t, nil, append([]string{"explain"}, bad...)...); code != 2 || !strings.HasPrefix(errOut, "envoy-rls explain: ") {
			t.Errorf("explain %v: exit %d, stderr %q; want 2 with an error", bad, code, errOut)
		}
	}
}

// TestExplainLive: `envoy-rls explain --addr` shows each counter's state
// as the running server holds it, on Redis and on the in-process store,
// and explaining consumes nothing: the Redis value stays the same and the
// next request sees one hit less only for its own.
func TestExplainLive(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		s, r := startOnRedis(t, map[string]string{"shop.yaml": explainRules})
		// per_user is a fixed window: its count is a field of its
		// window's hash.
		explainLive(t, s, func(key, field string) string {
			v, err := r.Client(t).HGet(context.Background(), key, field).Result()
			if err != nil {
				t.Fatalf("HGET %s %s: %v", key, field, err)
			}
			return v
		})
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"shop.yaml": explainRules})})
		explainLive(t, s, nil)
	})
}

func explainLive(t *testing.T, s *server, value func(key, field string) string) {
	for range 2 {
		s.ask("shop", desc("user", "alice"))
	}
	var before string
	for i := range 3 {
		rep := explainJSON(t, "--addr", s.DebugAddr, "--domain", "shop", "-d", "user=alice")
		l := rep.Descriptors[0].Limits[0]
		if !rep.Live || l.Name != "per_user" || l.State == nil || !l.State.Exists || l.State.Remaining != 8 || l.State.TTLMS <= 0 {
			t.Fatalf("explain %d: %+v state %+v, want the live counter with 8 remaining", i, l, l.State)
		}
		if value == nil {
			continue
		}
		if v := value(l.Key, l.Field); i == 0 {
			if v != "2" {
				t.Fatalf("explain %d: %s field %q holds %q, want the 2 hits", i, l.Key, l.Field, v)
			}
			before = v
		} else if v != before {
			t.Fatalf("explain %d changed %s field %s from %q to %q", i, l.Key, l.Field, before, v)
		}
	}
	resp := s.ask("shop", desc("user", "alice"))
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 7 {
		t.Fatalf("the request after explaining has %d remaining, want 7 (explain consumed hits)", got)
	}
	_, errOut, code := runCLI(t, nil, "explain", "--addr", s.DebugAddr, "--domain", "shop", "-d", "user=")
	if code != 0 {
		t.Errorf("explain of an empty value: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, nil, "explain", "--addr", freeAddr(t), "--timeout", "5s", "--domain", "shop", "-d", "a=b"); code != 1 || !strings.Contains(errOut, "/debug/explain") {
		t.Errorf("explain against nothing: exit %d, stderr %q; want 1 naming the endpoint", code, errOut)
	}
}

// inspectReport is the part of `envoy-rls inspect --json` the test reads.
type inspectReport struct {
	Masters, Scanned, Ours, Foreign, Unreadable int
	Domains                                     []struct {
		Name string
		Keys int
	}
	TopUsed []struct {
		Name, Field, Domain, Algorithm, Rule string
		Entries                              []struct{ Key, Value string }
		Value, Remaining                     int64
		TTLMS                                float64 `json:"ttl_ms"`
		MemoryBytes                          int64   `json:"memory_bytes"`
	} `json:"top_used"`
}

// TestInspectCommand: `envoy-rls inspect` decodes the keys a server wrote
// (a fixed window's: the field of its window's hash) back to domain,
// descriptor, algorithm and rule, counts a foreign key, and writes
// nothing.
func TestInspectCommand(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"shop.yaml": explainRules})
	s, r := startOnRedis(t, map[string]string{"shop.yaml": explainRules}, "--redis-key-prefix", "prod:")
	for range 3 {
		s.ask("shop", desc("user", "alice"))
	}
	s.ask("shop", desc("user", "bob", "path", "/x"))
	ctx := context.Background()
	rc := r.Client(t)
	if err := rc.Set(ctx, "not-ours", "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	changes := func() string {
		info, err := rc.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "rdb_changes_since_last_save:") {
				return line
			}
		}
		t.Fatal("INFO persistence has no rdb_changes_since_last_save")
		return ""
	}
	before := changes()
	out, errOut, code := runCLI(t, nil, "inspect", "--redis-url", "redis://"+r.Addr, "--redis-key-prefix", "prod:", "--config-dir", dir, "--scan-count", "1", "--json")
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	if after := changes(); after != before {
		t.Errorf("inspect wrote to Redis: %s, then %s", before, after)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if rep.Masters != 1 || rep.Ours != 2 || rep.Foreign != 1 || rep.Unreadable != 0 || len(rep.Domains) != 1 || rep.Domains[0].Name != "shop" {
		t.Fatalf("report %+v", rep)
	}
	top := rep.TopUsed[0]
	if !strings.HasPrefix(top.Name, "prod:r3{shop:f2s0:") || top.Field != "user:alice" ||
		top.Domain != "shop" || top.Algorithm != "fixed_window" || top.Rule != "per_user" || top.Value != 3 || top.Remaining != 7 ||
		len(top.Entries) != 1 || top.Entries[0].Key != "user" || top.Entries[0].Value != "alice" || top.TTLMS <= 0 || top.MemoryBytes <= 0 {
		t.Errorf("most used key %+v, want alice's per_user counter with 3 hits", top)
	}
	text, _, code := runCLI(t, nil, "inspect", "--redis-url", "redis://"+r.Addr, "--redis-key-prefix", "prod:")
	if code != 0 || !strings.Contains(text, "2 envoy-rls") || !strings.Contains(text, "1 foreign (left alone)") || !strings.Contains(text, top.Name+" field user:alice\n") {
		t.Errorf("inspect text (exit %d):\n%s", code, text)
	}
	if _, errOut, code := runCLI(t, nil, "inspect"); code != 2 || !strings.Contains(errOut, "--redis-url: required") {
		t.Errorf("inspect without --redis-url: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, nil, "inspect", "--redis-url", "redis://"+r.Addr, "--redis-counter-hashes", "0"); code != 2 || !strings.Contains(errOut, "--redis-counter-hashes: 0") {
		t.Errorf("inspect --redis-counter-hashes 0: exit %d, stderr %q; want 2 naming the flag", code, errOut)
	}
	// The server recorded its counter-hash count (the default, 16) when
	// it became ready: inspect reads it, and refuses a flag that
	// disagrees, naming both counts (issue 39).
	if v := rc.HGet(ctx, "prod:envoy-rls:layout:r3:{meta}", "counter_hashes").Val(); v != "16" {
		t.Fatalf("the server recorded counter hashes %q, want 16", v)
	}
	if _, errOut, code := runCLI(t, nil, "inspect", "--redis-url", "redis://"+r.Addr, "--redis-key-prefix", "prod:", "--redis-counter-hashes", "32"); code != 2 || !strings.Contains(errOut, "given 32, the deployment's is 16") {
		t.Errorf("inspect --redis-counter-hashes 32 on a deployment of 16: exit %d, stderr %q; want 2 naming both", code, errOut)
	}
	if _, errOut, code := runCLI(t, nil, "explain", "--redis-url", "redis://"+r.Addr, "--redis-key-prefix", "prod:", "--redis-counter-hashes", "32", "--config-dir", dir, "--domain", "shop", "-d", "user=alice"); code != 2 || !strings.Contains(errOut, "given 32, the deployment's is 16") {
		t.Errorf("explain --redis-counter-hashes 32 on a deployment of 16: exit %d, stderr %q; want 2 naming both", code, errOut)
	}
	if out, errOut, code := runCLI(t, nil, "explain", "--redis-url", "redis://"+r.Addr, "--redis-key-prefix", "prod:", "--config-dir", dir, "--domain", "shop", "-d", "user=alice", "--json"); code != 0 || !strings.Contains(out, top.Name) {
		t.Errorf("explain with the recorded count: exit %d, stderr %q; want the key %s in:\n%s", code, errOut, top.Name, out)
	}
}

// TestExplainLiveTLS: with --admin-tls-cert the debug listener speaks
// TLS, and `explain --addr --tls-ca` explains live over it; without the
// CA the plain-HTTP request fails, naming the endpoint.
func TestExplainLiveTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "debug-server")
	cert, key := issue(t, ca, 2, true)
	f := func(name string) string { return filepath.Join(dir, name) }
	writeBytes(t, f("ca.pem"), ca.PEM)
	writeBytes(t, f("server.pem"), cert)
	writeBytes(t, f("server-key.pem"), key)
	s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"shop.yaml": explainRules}), Args: []string{
		"--admin-tls-cert", f("server.pem"), "--admin-tls-key", f("server-key.pem")}})
	s.ask("shop", desc("user", "alice"))

	rep := explainJSON(t, "--addr", s.DebugAddr, "--tls-ca", f("ca.pem"), "--domain", "shop", "-d", "user=alice")
	if l := rep.Descriptors[0].Limits[0]; !rep.Live || l.State == nil || l.State.Remaining != 9 {
		t.Fatalf("explain over TLS: live %v, limit %+v state %+v; want the live counter with 9 remaining", rep.Live, l, l.State)
	}
	if _, errOut, code := runCLI(t, nil, "explain", "--addr", s.DebugAddr, "--domain", "shop", "-d", "user=alice"); code != 1 || !strings.Contains(errOut, "/debug/explain") {
		t.Errorf("explain over plain HTTP to a TLS listener: exit %d, stderr %q; want 1 naming the endpoint", code, errOut)
	}
}
