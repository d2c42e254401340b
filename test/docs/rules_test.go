package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRuleFileExamples: every yaml block of README.md and docs/ that is a
// whole rule file (it starts with domain:) validates, so the grammar the
// documents show is the one the binary reads.
func TestRuleFileExamples(t *testing.T) {
	found := 0
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, path)
		for _, f := range parseFences(string(data)) {
			if len(f.info) == 0 || f.info[0] != "yaml" || !strings.HasPrefix(firstYAMLLine(f.lines), "domain:") {
				continue
			}
			found++
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(strings.Join(f.lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(binPath, "validate", dir).CombinedOutput(); err != nil {
				t.Errorf("%s:%d: the rule file shown does not validate: %v\n%s", rel, f.line, err, out)
			}
		}
	}
	if found < 2 {
		t.Errorf("%d whole rule files in README.md and docs/, want at least 2 (README's and docs/rules.md's)", found)
	}
}

// firstYAMLLine is the first line that is neither blank nor a comment.
func firstYAMLLine(lines []string) string {
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return t
		}
	}
	return ""
}
