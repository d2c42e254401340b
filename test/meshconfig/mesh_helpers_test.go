package meshconfig

import (
	"bytes"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// repoGlob lists the files matching pattern (relative to the repository
// root, slash-separated, sorted) and fails the test when there are none, so
// that a moved directory cannot silently leave a test with nothing to check.
func repoGlob(t testing.TB, pattern string) []string {
	t.Helper()
	out, err := shipped.Glob(childproc.Root(), pattern)
	if err != nil {
		t.Fatalf("meshconfig: %v", err)
	}
	return out
}

// flagSources are the source files that declare envoy-rls's flags: the
// command's entry point, its command line, serve's settings and the
// clients (issue 41 moved them out of cmd/envoy-rls).
func flagSources(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"cmd/envoy-rls", "internal/cli", "internal/clients", "internal/serveconfig"} {
		for _, f := range repoGlob(t, dir+"/*.go") {
			if !strings.HasSuffix(f, "_test.go") {
				out = append(out, f)
			}
		}
	}
	return out
}

// mutate returns a copy of data with the first occurrence of old replaced by
// repl. It fails the test when old does not occur, so a mutation that no
// longer applies to the shipped file cannot pass unnoticed.
func mutate(t testing.TB, data []byte, old, repl string) []byte {
	t.Helper()
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("meshconfig: mutation target %q not found; update the mutation test", old)
	}
	return bytes.Replace(data, []byte(old), []byte(repl), 1)
}

// wantErr fails the test unless err is non-nil and mentions every fragment.
func wantErr(t testing.TB, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("validation passed; want an error mentioning %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error does not mention %q:\n%v", f, err)
		}
	}
}
