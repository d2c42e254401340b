package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeIsAGuide: the README's first screen says what envoy-rls is, gets
// a reader to a 429 through a real Envoy with the commands it shows (the
// 429 block runs in TestDocExamples), says how Envoy reaches it, and the
// README stays a guide, with the reference in docs/.
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
		"make run", "make run-envoy", "make test", // the opening commands
		"make envoy", "bin/envoy-rls", // where Envoy and envoy-rls are: nothing needs them on PATH
		"rate-limit service for Envoy and Istio",                                       // what it is
		"docker run", "go install github.com/envoy-rls/envoy-rls/cmd/envoy-rls@latest", // how to run it
		"envoy.filters.http.ratelimit", "cluster_name: envoy_rls", // how Envoy reaches it
		"```sh run envoy", "429", // a 429 through a real Envoy, tested
	} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first 40 lines lack %q", want)
		}
	}
	if !strings.Contains(string(data), "\n## Contents\n") {
		t.Error("README.md has no ## Contents")
	}
}

// TestReadmeEnvoyExcerpt: each line of the README's Envoy excerpt (its
// first yaml block), without its comment, is a line of
// examples/envoy/envoy.yaml, which a real Envoy runs in TestDocExamples:
// what a newcomer copies is what was tested.
func TestReadmeEnvoyExcerpt(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := os.ReadFile(filepath.Join(repoRoot, "examples", "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	for _, l := range strings.Split(string(bootstrap), "\n") {
		shipped[yamlLine(l)] = true
	}
	var excerpt *fence
	for _, f := range parseFences(string(readme)) {
		if len(f.info) > 0 && f.info[0] == "yaml" {
			excerpt = f
			break
		}
	}
	if excerpt == nil {
		t.Fatal("README.md has no yaml block (the Envoy excerpt)")
	}
	for _, l := range excerpt.lines {
		if y := yamlLine(l); y != "" && !shipped[y] {
			t.Errorf("README.md's Envoy excerpt has %q, which examples/envoy/envoy.yaml does not", y)
		}
	}
}

// yamlLine is a YAML line without its indentation, list dash and comment.
func yamlLine(l string) string {
	if i := strings.Index(l, " #"); i >= 0 {
		l = l[:i]
	}
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "#") {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(l, "- "))
}
