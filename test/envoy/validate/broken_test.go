package validate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokenCopiesFail: copies of envoy-config/envoy.yaml, each broken in
// one way, must fail the checks with the message naming what is wrong.
// (Broken copies of the EnvoyFilters are test/istio's: a real istiod
// applies them.)
func TestBrokenCopiesFail(t *testing.T) {
	root := repoRoot(t)
	t.Run("envoy.yaml with an unknown field", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "envoy-config/envoy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		broken := mutate(t, data, "domain: edge\n", "domain: edge\n              failure_mode_dny: true\n")
		wantFailure(t, checkBootstrap(t, "broken-envoy.yaml", broken), "envoy --mode validate", "failure_mode_dny")
	})
	t.Run("envoy.yaml's filter on a cluster it does not define", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "envoy-config/envoy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		broken := mutate(t, data, "cluster_name: envoy_rls\n", "cluster_name: envoy_rls_typo\n")
		wantFailure(t, checkBootstrap(t, "broken-envoy.yaml", broken), `rate_limit_service cluster "envoy_rls_typo" is not a cluster of the proxy`)
	})
}

// mutate returns data with the first old replaced by repl, failing the
// test when old is gone (the broken copy would test nothing).
func mutate(t *testing.T, data []byte, old, repl string) []byte {
	t.Helper()
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("the shipped file no longer holds %q: update the broken copy", old)
	}
	return bytes.Replace(data, []byte(old), []byte(repl), 1)
}

// wantFailure fails the test unless err names every fragment.
func wantFailure(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("the broken copy passed")
	}
	t.Logf("fails as it must:\n%v", err)
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("the failure does not name %q:\n%v", f, err)
		}
	}
}
