package refproc

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// TestVersionMatchesMakefile: the version the tests look for is the one
// `make test-deps` installs.
func TestVersionMatchesMakefile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(childproc.Root(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^REF_VERSION := (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no REF_VERSION")
	}
	if string(m[1]) != Version {
		t.Errorf("Makefile REF_VERSION %s, refproc.Version %s: keep them the same", m[1], Version)
	}
}
