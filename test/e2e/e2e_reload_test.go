package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
)

// apiRules returns a one-rule domain "api" whose limit is n per hour.
func apiRules(n int) string {
	return fmt.Sprintf(`
domain: api
descriptors:
  - key: route
    rate_limit:
      name: per_route
      unit: hour
      requests_per_unit: %d
      algorithm: fixed_window
`, n)
}

// badRules fails validation: an unknown unit.
const badRules = `
domain: api
descriptors:
  - key: route
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
`

// waitLimit polls with check-only requests (which consume nothing) until
// route=value reports requests_per_unit n.
func waitLimit(t *testing.T, s *server, value string, n uint32) {
	t.Helper()
	eventually.True(t, fmt.Sprintf("limit %d applies", n), func() (bool, string) {
		st := s.ask("api", checkOnly(desc("route", value))).GetStatuses()[0]
		return st.GetCurrentLimit().GetRequestsPerUnit() == n, st.String()
	})
}

func reloads(m metrics, result string) float64 {
	return m.get("envoy_rls_config_reloads_total", map[string]string{"result": result})
}

// TestReloadReplaceAndInvalid replaces a rule file under a running server,
// then breaks it: the new limit applies without a restart, and the broken
// file leaves the last good rules in force and is counted as an error.
func TestReloadReplaceAndInvalid(t *testing.T) {
	t.Parallel()
	dir := rulesDir(t, map[string]string{"api.yaml": apiRules(2)})
	s := startServer(t, serveOpts{ConfigDir: dir})

	for i := range 3 {
		want := pb.RateLimitResponse_OK
		if i == 2 {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		if got := s.ask("api", desc("route", "checkout")).GetOverallCode(); got != want {
			t.Fatalf("before reload, request %d: %v, want %v", i+1, got, want)
		}
	}

	// Raise the limit: the same counter (requests_per_unit is not part of
	// the key) now has room again.
	writeFile(t, filepath.Join(dir, "api.yaml"), apiRules(4))
	waitLimit(t, s, "checkout", 4)
	st := onlyStatus(t, s.ask("api", desc("route", "checkout")))
	if st.GetCode() != pb.RateLimitResponse_OK || st.GetLimitRemaining() != 1 {
		t.Errorf("after raising the limit to 4 with 2 used: %v, want OK with limit_remaining 1", st)
	}

	before := s.scrape()
	writeFile(t, filepath.Join(dir, "api.yaml"), badRules)
	eventually.True(t, "reload error counted", func() (bool, string) {
		m := s.scrape()
		return reloads(m, "error") > reloads(before, "error"), fmt.Sprintf("reloads error=%v", reloads(m, "error"))
	})
	if !strings.Contains(s.logs.String(), "fortnight") {
		t.Errorf("reload error not logged with its cause (unknown unit \"fortnight\")")
	}
	// The last good rules (4 per hour, 3 used) still apply.
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		st := onlyStatus(t, s.ask("api", desc("route", "checkout")))
		if st.GetCode() != want || st.GetCurrentLimit().GetRequestsPerUnit() != 4 {
			t.Errorf("with a broken file, request %d: %v, want %v under the old limit of 4", i+1, st, want)
		}
	}
	if code, _ := s.get("/readyz"); code != 200 {
		t.Errorf("/readyz %d with a broken file but good rules in force, want 200", code)
	}

	// A new file with a new domain is picked up too.
	writeFile(t, filepath.Join(dir, "api.yaml"), apiRules(4))
	writeFile(t, filepath.Join(dir, "extra.yml"), strings.ReplaceAll(apiRules(1), "domain: api", "domain: extra"))
	eventually.True(t, "new domain loaded", func() (bool, string) {
		st := s.ask("extra", checkOnly(desc("route", "x"))).GetStatuses()[0]
		return st.GetCurrentLimit().GetRequestsPerUnit() == 1, st.String()
	})
	if got := reloads(s.scrape(), "success"); got < 2 {
		t.Errorf("envoy_rls_config_reloads_total{result=\"success\"} = %v, want ≥ 2", got)
	}
	s.stop()
}

// TestReloadConfigMapSwap lays the directory out as Kubernetes mounts a
// ConfigMap (files are symlinks into ..data, itself a symlink to a
// timestamped directory) and swaps ..data atomically, as the kubelet does.
func TestReloadConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(name, rules string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "api.yaml"), []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version("..2024_01_01_00_00_00.000000001", apiRules(2))
	if err := os.Symlink("..2024_01_01_00_00_00.000000001", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serveOpts{ConfigDir: dir})
	waitLimit(t, s, "home", 2)

	version("..2024_01_01_00_05_00.000000002", apiRules(7))
	if err := os.Symlink("..2024_01_01_00_05_00.000000002", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2024_01_01_00_00_00.000000001")); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, s, "home", 7)
	if got := reloads(s.scrape(), "error"); got != 0 {
		t.Errorf("envoy_rls_config_reloads_total{result=\"error\"} = %v after a clean swap, want 0", got)
	}
	s.stop()
}
