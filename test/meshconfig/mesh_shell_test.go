package meshconfig

import "testing"

// TestE2EScriptShellcheck runs shellcheck on the e2e scripts. It fails, not
// skips, without shellcheck: `make test` installs it (Debian package
// "shellcheck").
func TestE2EScriptShellcheck(t *testing.T) {
	if err := checkScripts(t, nil); err != nil {
		t.Fatal(err)
	}
}
