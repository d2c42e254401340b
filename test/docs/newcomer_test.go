package docs

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNewcomerPath: the examples run with a newcomer's PATH, on which
// neither envoy-rls nor envoy is, so a document that calls either by its
// bare name fails TestDocExamples; bin/envoy-rls and bin/envoy, as make
// build and make envoy leave them, run.
func TestNewcomerPath(t *testing.T) {
	ws := workspace(t)
	tests := []struct {
		script string
		ok     bool
	}{
		{"envoy-rls --version", false},
		{"envoy --version", false},
		{"bin/envoy-rls --version", true},
		{"bin/envoy --version", true},
		{"export PATH=\"$PWD/bin:$PATH\"\nenvoy-rls --version", true},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
			defer cancel()
			out, err := newcomerShell(ctx, ws, tt.script).CombinedOutput()
			if (err == nil) != tt.ok {
				t.Errorf("%q: err %v, want success %v\n%s", tt.script, err, tt.ok, out)
			}
		})
	}
}

// TestIsSetup: only blocks made of exports carry over to the later blocks
// of their document.
func TestIsSetup(t *testing.T) {
	tests := []struct {
		script string
		want   bool
	}{
		{`export PATH="$PWD/bin:$PATH"`, true},
		{"# once per shell\nexport PATH=\"$PWD/bin:$PATH\"\n", true},
		{"export A=1\nbin/envoy-rls validate examples/config", false},
		{"# only a comment", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := isSetup(tt.script); got != tt.want {
			t.Errorf("isSetup(%q) = %v, want %v", tt.script, got, tt.want)
		}
	}
}

// makeRE finds a make command and its first target in a command line or
// an inline code span.
var makeRE = regexp.MustCompile(`(?:^|[\s;&|(` + "`" + `])make ((?:-[-\w]+ )*)([a-z][\w-]*)`)

// TestMakeTargetsExist: every `make TARGET` that README.md and docs/ show,
// in a code span or a shell block (run or norun), is a target of the
// Makefile, so a command the documents give a newcomer does not end in
// "No rule to make target".
func TestMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := makeTargets(string(mk))
	for _, must := range []string{"run", "test", "envoy", "run-envoy"} {
		if !slices.Contains(targets, must) {
			t.Fatalf("the Makefile has no target %q (found %v)", must, targets)
		}
	}
	found := 0
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, path)
		for _, code := range codeOf(string(data)) {
			for _, m := range makeRE.FindAllStringSubmatch(code.text, -1) {
				found++
				if !slices.Contains(targets, m[2]) {
					t.Errorf("%s:%d: `make %s`: the Makefile has no such target", rel, code.line, m[2])
				}
			}
		}
	}
	t.Logf("%d make commands checked", found)
	if found < 5 {
		t.Errorf("%d make commands in README.md and docs/, want at least 5: the scan finds nothing", found)
	}
}

// makeTargets are the Makefile's explicit targets.
func makeTargets(mk string) []string {
	var out []string
	for _, l := range strings.Split(mk, "\n") {
		head, _, ok := strings.Cut(l, ":")
		if !ok || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "#") || strings.Contains(head, "=") || strings.Contains(l, ":=") {
			continue
		}
		for _, name := range strings.Fields(head) {
			if !strings.Contains(name, "$") && !strings.HasPrefix(name, ".") {
				out = append(out, name)
			}
		}
	}
	return out
}

// code is one code span's or shell block line's text and its line.
type code struct {
	line int
	text string
}

// spanRE is an inline code span; it may wrap onto the next line.
var spanRE = regexp.MustCompile("`[^`]+`")

// codeOf returns a document's inline code spans (a wrapped span's line
// break read as a space) and the lines of its shell blocks.
func codeOf(doc string) []code {
	var out []code
	inFence, shell := false, false
	// prose is the text outside fences, each line's start recorded, so a
	// span found in it knows its line.
	var prose strings.Builder
	var starts, lineNos []int
	for i, l := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			if !inFence {
				info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
				shell = len(info) > 0 && shellLangs[info[0]]
			}
			inFence = !inFence
			// A fence ends any span: no span runs across one.
			prose.WriteString("\x00")
			continue
		}
		switch {
		case inFence && shell:
			out = append(out, code{i + 1, strings.TrimPrefix(trimmed, "$ ")})
		case !inFence:
			starts, lineNos = append(starts, prose.Len()), append(lineNos, i+1)
			prose.WriteString(l + " ")
		}
	}
	text := prose.String()
	for _, loc := range spanRE.FindAllStringIndex(text, -1) {
		span := text[loc[0]+1 : loc[1]-1]
		if strings.Contains(span, "\x00") {
			continue
		}
		line := 0
		for j, st := range starts {
			if st <= loc[0] {
				line = lineNos[j]
			}
		}
		out = append(out, code{line, strings.Join(strings.Fields(span), " ")})
	}
	return out
}
