package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/promtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

const overrideRules = `
domain: ovr
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, name: per_user}
`

// tokenFile writes an admin token file and returns its path.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admin-token")
	writeFile(t, p, token+"\n")
	return p
}

// overrideCLI runs `envoy-rls override <args>` against s's admin listener.
func (s *server) overrideCLI(t *testing.T, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	full := append([]string{"override", args[0], "--addr", s.DebugAddr}, args[1:]...)
	if token != "" {
		full = append(full, "--token-file", token)
	}
	return runCLI(t, nil, full...)
}

// currentLimit asks s, consuming nothing, for the limit user=u runs under.
func (s *server) currentLimit(u string) uint32 {
	s.t.Helper()
	resp := s.ask("ovr", checkOnly(desc("user", u)))
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// awaitLimit waits until every server reports limit for user=u.
func awaitLimit(t *testing.T, why string, u string, limit uint32, servers ...*server) {
	t.Helper()
	for i, s := range servers {
		eventually.True(t, fmt.Sprintf("%s: replica %d reports limit %d", why, i, limit), func() (bool, string) {
			got := s.currentLimit(u)
			return got == limit, fmt.Sprintf("limit %d", got)
		})
	}
}

// TestOverrideReplicas: an override set through one replica's admin API
// applies on both replicas (they share it through Redis), admits exactly
// the overridden count, shows in /debug/config and the log with its
// reason, is counted, expires by itself, and a clear through the other
// replica lifts it everywhere.
func TestOverrideReplicas(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	tok := tokenFile(t, "e2e-token")
	dir := rulesDir(t, map[string]string{"ovr.yaml": overrideRules})
	args := []string{"--redis-url", "redis://" + r.Addr, "--admin-token-file", tok}
	a := startServer(t, serveOpts{ConfigDir: dir, Args: args})
	b := startServer(t, serveOpts{ConfigDir: dir, Args: args})

	out, stderr, code := a.overrideCLI(t, tok, "set", "--domain", "ovr", "--limit", "per_user", "--factor", "0.5", "--ttl", "3s", "--reason", "incident 42")
	if code != 0 || !strings.Contains(out, "factor=0.5") {
		t.Fatalf("override set: exit %d\n%s%s", code, out, stderr)
	}
	awaitLimit(t, "after set on a", "u1", 5, a, b)
	admitted := 0
	for range 10 {
		if b.ask("ovr", desc("user", "u1")).OverallCode == pb.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("replica b admitted %d of 10 under the halved limit, want 5", admitted)
	}
	_, cfg := b.getDebug("/debug/config")
	var dc struct {
		Limits []struct {
			Limit, Source string
			Effective     uint32 `json:"effective_requests_per_unit"`
			Override      *struct{ Reason string }
		}
	}
	if err := json.Unmarshal([]byte(cfg), &dc); err != nil || len(dc.Limits) != 1 {
		t.Fatalf("/debug/config: %v\n%s", err, cfg)
	}
	if l := dc.Limits[0]; l.Limit != "per_user" || l.Source != "manual" || l.Effective != 5 || l.Override == nil || l.Override.Reason != "incident 42" {
		t.Errorf("/debug/config limits[0] = %+v, want per_user manual 5 with its reason", l)
	}
	if n := a.scrape().get("envoy_rls_override_changes_total", map[string]string{"action": "set", "source": "manual"}); n != 1 {
		t.Errorf("set count on a: %v, want 1", n)
	}
	if !strings.Contains(a.logs.String(), `"reason":"incident 42"`) {
		t.Errorf("the set is not logged with its reason:\n%s", a.logs.String())
	}

	// Expiry: 3 s after the set, both replicas are back on the configured limit.
	awaitLimit(t, "after expiry", "u2", 10, a, b)
	eventually.True(t, "the expiry is counted", func() (bool, string) {
		n := b.scrape().get("envoy_rls_override_changes_total", map[string]string{"action": "expire", "source": "manual"})
		return n == 1, fmt.Sprintf("expire count %v", n)
	})

	if _, stderr, code := a.overrideCLI(t, tok, "set", "--domain", "ovr", "--limit", "per_user", "--requests-per-unit", "2", "--ttl", "15m", "--reason", "bots"); code != 0 {
		t.Fatalf("second set: exit %d: %s", code, stderr)
	}
	awaitLimit(t, "after the absolute set", "u3", 2, a, b)
	out, stderr, code = b.overrideCLI(t, tok, "list")
	if code != 0 || !strings.Contains(out, "requests_per_unit=2") || !strings.Contains(out, "bots") {
		t.Fatalf("override list on b: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := b.overrideCLI(t, tok, "clear", "--domain", "ovr", "--reason", "resolved"); code != 0 {
		t.Fatalf("clear: exit %d: %s", code, stderr)
	}
	awaitLimit(t, "after clear on b", "u4", 10, a, b)
}

// TestOverrideAuth: on the in-process store, the admin API refuses a
// missing or wrong token and is off without --admin-token-file; with the
// right token an override applies at once.
func TestOverrideAuth(t *testing.T) {
	t.Parallel()
	tok := tokenFile(t, "right")
	wrong := tokenFile(t, "wrong")
	dir := rulesDir(t, map[string]string{"ovr.yaml": overrideRules})
	s := startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--admin-token-file", tok}})
	off := startServer(t, serveOpts{ConfigDir: dir})
	set := []string{"set", "--domain", "ovr", "--limit", "per_user", "--factor", "0.3", "--ttl", "1m", "--reason", "test"}
	tests := []struct {
		name  string
		srv   *server
		token string
		want  string
	}{
		{"no token", s, "", "401"},
		{"wrong token", s, wrong, "401"},
		{"api off", off, tok, "403"},
	}
	for _, tc := range tests {
		for _, args := range [][]string{set, {"list"}} {
			_, stderr, code := tc.srv.overrideCLI(t, tc.token, args...)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: override %s: exit %d, stderr %q; want 1 and %s", tc.name, args[0], code, stderr, tc.want)
			}
		}
	}
	if got := s.currentLimit("u"); got != 10 {
		t.Fatalf("after refused calls: limit %d, want the configured 10", got)
	}
	if _, stderr, code := s.overrideCLI(t, tok, set...); code != 0 {
		t.Fatalf("override set with the right token: exit %d: %s", code, stderr)
	}
	if got := s.currentLimit("u"); got != 3 {
		t.Errorf("after set on the in-process store: limit %d, want 3 at once", got)
	}
	_, stderr, code := s.overrideCLI(t, tok, "set", "--domain", "ovr", "--limit", "per_user", "--factor", "0.3", "--reason", "no ttl")
	if code != 1 || !strings.Contains(stderr, "--ttl") {
		t.Errorf("set without --ttl: exit %d, stderr %q; want 1 naming --ttl", code, stderr)
	}
	_, stderr, code = s.overrideCLI(t, tok, "set", "--domain", "ovr", "--limit", "per_usr", "--factor", "0.3", "--ttl", "1m", "--reason", "typo")
	if code != 1 || !strings.Contains(stderr, `no limit "per_usr" (want one of: per_user)`) {
		t.Errorf("set of a limit the rules lack: exit %d, stderr %q; want 1 listing per_user", code, stderr)
	}
}

// TestAdaptive: with a real Prometheus scraping a gauge the test controls,
// two replicas' adaptive controller cuts the limit while the signal is
// high, both replicas apply the factor, `override list` shows it as
// adaptive, and a low signal brings the configured limit back.
func TestAdaptive(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	g := promtest.NewGauge(t, "e2e_load")
	prom := promtest.Start(t, g.Addr)
	tok := tokenFile(t, "e2e-token")
	dir := rulesDir(t, map[string]string{"ovr.yaml": overrideRules})
	ctl := filepath.Join(t.TempDir(), "adaptive.yaml")
	writeFile(t, ctl, `
interval: 200ms
controllers:
  - domain: ovr
    limit: per_user
    signals: [{name: load, query: max(e2e_load), high: 0.8, low: 0.5}]
    decrease: 0.5
    increase: 0.5
    floor: 0.2
    min_interval: 1ms
`)
	args := []string{"--redis-url", "redis://" + r.Addr, "--admin-token-file", tok, "--adaptive-config", ctl, "--prometheus-url", prom.URL}
	a := startServer(t, serveOpts{ConfigDir: dir, Args: args})
	b := startServer(t, serveOpts{ConfigDir: dir, Args: args})

	g.Set(0.9)
	prom.AwaitValue(t, g, 0.9)
	awaitLimit(t, "high signal", "u1", 2, a, b) // 10 × 0.2, the floor
	out, stderr, code := b.overrideCLI(t, tok, "list")
	if code != 0 || !strings.Contains(out, "adaptive") || !strings.Contains(out, "factor=0.2") {
		t.Fatalf("override list: exit %d\n%s%s", code, out, stderr)
	}
	g.Set(0.1)
	prom.AwaitValue(t, g, 0.1)
	awaitLimit(t, "low signal", "u2", 10, a, b)
}

// TestOverrideMTLS: with the debug listener on mTLS and no token, a client
// certificate the client CA signed authorises the admin API; a client
// without one is refused in the handshake.
func TestOverrideMTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	serverCA, clientCA := newCA(t, "admin-server"), newCA(t, "admin-clients")
	files := map[string][]byte{"server-ca.pem": serverCA.PEM, "client-ca.pem": clientCA.PEM}
	files["server.pem"], files["server-key.pem"] = issue(t, serverCA, 2, true)
	files["client.pem"], files["client-key.pem"] = issue(t, clientCA, 3, false)
	for name, data := range files {
		writeBytes(t, filepath.Join(dir, name), data)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	s := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"ovr.yaml": overrideRules}), Args: []string{
		"--admin-tls-cert", f("server.pem"), "--admin-tls-key", f("server-key.pem"), "--admin-tls-client-ca", f("client-ca.pem")}})

	set := []string{"set", "--domain", "ovr", "--limit", "per_user", "--factor", "0.5", "--ttl", "1m", "--reason", "mtls"}
	_, stderr, code := s.overrideCLI(t, "", append(set, "--tls-ca", f("server-ca.pem"))...)
	if code != 1 {
		t.Errorf("without a client certificate: exit %d, stderr %q; want 1", code, stderr)
	}
	// Under TLS 1.3 the client learns of the refusal as a failed connection
	// of any wording; the server's log says why.
	eventually.True(t, "the handshake without a client certificate is refused", func() (bool, string) {
		return strings.Contains(s.logs.String(), "didn't provide a certificate"), ""
	})
	if got := s.currentLimit("u"); got != 10 {
		t.Fatalf("after the refused set: limit %d, want the configured 10", got)
	}
	out, stderr, code := s.overrideCLI(t, "", append(set, "--tls-ca", f("server-ca.pem"), "--tls-cert", f("client.pem"), "--tls-key", f("client-key.pem"))...)
	if code != 0 || !strings.Contains(out, "factor=0.5") {
		t.Fatalf("with the client certificate: exit %d\n%s%s", code, out, stderr)
	}
	if got := s.currentLimit("u"); got != 5 {
		t.Errorf("after set over mTLS: limit %d, want 5", got)
	}
}

// TestOverrideKeyPrefix: two deployments sharing one Redis under
// different --redis-key-prefix values keep their overrides apart, as
// their counters: each keeps its own override of the same limit.
func TestOverrideKeyPrefix(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	tok := tokenFile(t, "e2e-token")
	dir := rulesDir(t, map[string]string{"ovr.yaml": overrideRules})
	start := func(prefix string) *server {
		return startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--redis-url", "redis://" + r.Addr, "--admin-token-file", tok, "--redis-key-prefix", prefix}})
	}
	a, b := start("team-a:"), start("team-b:")
	for _, set := range []struct {
		s      *server
		factor string
	}{{a, "0.5"}, {b, "0.2"}} {
		if _, stderr, code := set.s.overrideCLI(t, tok, "set", "--domain", "ovr", "--limit", "per_user", "--factor", set.factor, "--ttl", "15m", "--reason", "x"); code != 0 {
			t.Fatalf("set: exit %d: %s", code, stderr)
		}
	}
	// list reads the store itself, so it shows what a shared key would
	// have let the second set overwrite.
	for _, want := range []struct {
		s         *server
		has, hasn string
	}{{a, "factor=0.5", "factor=0.2"}, {b, "factor=0.2", "factor=0.5"}} {
		out, stderr, code := want.s.overrideCLI(t, tok, "list")
		if code != 0 || !strings.Contains(out, want.has) || strings.Contains(out, want.hasn) {
			t.Errorf("override list: exit %d, want %s and not %s:\n%s%s", code, want.has, want.hasn, out, stderr)
		}
	}
	awaitLimit(t, "team a", "u", 5, a)
	awaitLimit(t, "team b", "u", 2, b)
}
