package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeIsAGuide: the README's first screen says what envoy-rls is, how
// to run it and how Envoy reaches it, and the README stays a guide, with
// the reference in docs/.
func TestReadmeIsAGuide(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move reference material into docs/", len(lines))
	}
	first := strings.Join(lines[:min(40, len(lines))], "\n")
	for _, want := range []string{
		"make run", "make test", // the opening commands
		"rate-limit service for Envoy and Istio",                                       // what it is
		"docker run", "go install github.com/envoy-rls/envoy-rls/cmd/envoy-rls@latest", // how to run it
		"envoy.filters.http.ratelimit", "cluster_name: envoy_rls", // how Envoy reaches it
		"429",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first 40 lines lack %q", want)
		}
	}
	if !strings.Contains(string(data), "\n## Contents\n") {
		t.Error("README.md has no ## Contents")
	}
}
