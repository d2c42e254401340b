package arch

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// designLink is a link into the design of record, from anywhere in the
// tree (code comments write the path from the repository root).
var designLink = regexp.MustCompile(`architecture\.md#([a-z0-9-]+)`)

// outsideDesign is how comments used to cite, by section sign, a design
// document that is not in the repository (spelled with the sign's escape,
// so that this guard does not match itself).
var outsideDesign = regexp.MustCompile(`DESIGN \x{00A7}`)

// TestDesignLinks: every link into docs/architecture.md names one of its
// headings, and nothing cites the old design document outside the tree.
func TestDesignLinks(t *testing.T) {
	t.Parallel()
	_, dir, _ := listModule(t)
	doc, err := os.ReadFile(filepath.Join(dir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(doc))
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != dir && (strings.HasPrefix(name, ".") || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".lua":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		for _, m := range designLink.FindAllStringSubmatch(string(data), -1) {
			if !anchors[m[1]] {
				t.Errorf("%s links to docs/architecture.md#%s, which is no heading there", rel, m[1])
			}
		}
		if outsideDesign.Match(data) {
			t.Errorf("%s cites a section of the old design document, which is outside the repository: link a section of docs/architecture.md instead", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// headingAnchors returns the anchors GitHub gives the markdown headings of
// doc: lower case, spaces as '-', punctuation dropped.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// mdLink is a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks: every relative link of README.md and docs/*.md names a
// file of the repository and, with an anchor into a Markdown file, one of
// its headings (or <a id> anchors); moving a section between pages cannot leave a link behind.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	_, dir, _ := listModule(t)
	docs, err := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append([]string{filepath.Join(dir, "README.md"), filepath.Join(dir, "CHANGELOG.md")}, docs...) {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, path)
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			full := path
			if file != "" {
				full = filepath.Join(filepath.Dir(path), file)
			}
			if _, err := os.Stat(full); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, target)
				continue
			}
			if anchor == "" || filepath.Ext(full) != ".md" {
				continue
			}
			doc, err := os.ReadFile(full)
			if err != nil {
				t.Fatal(err)
			}
			if !headingAnchors(string(doc))[anchor] && !strings.Contains(string(doc), `<a id="`+anchor+`">`) {
				t.Errorf("%s links to %s, which is no heading there", rel, target)
			}
		}
	}
}
