package rules

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitBound bounds every wait for a reload. It is a deadline for a test that
// has already failed, not a timing assertion: reloads normally arrive within
// milliseconds.
const waitBound = 20 * time.Second

type watched struct {
	t      *testing.T
	loader *Loader
	events chan error
}

// startLoader loads dir, then runs its watcher until the test ends.
func startLoader(t *testing.T, dir string) *watched {
	t.Helper()
	w := &watched{t: t, events: make(chan error, 1000)}
	w.loader = NewLoader(dir, Options{
		Logger:       zaptest.NewLogger(t),
		Debounce:     20 * time.Millisecond,
		PollInterval: -1, // only events may trigger reloads here
		OnReload:     func(err error) { w.events <- err },
	})
	if err := w.loader.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if err := <-w.events; err != nil {
		t.Fatalf("OnReload(%v) after a good Reload", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.loader.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	})
	return w
}

// until waits for reloads until cond holds for the current snapshot.
func (w *watched) until(what string, cond func(*Snapshot) bool) {
	w.t.Helper()
	deadline := time.After(waitBound)
	for !cond(w.loader.Current()) {
		select {
		case <-w.events:
		case <-deadline:
			w.t.Fatalf("no reload brought %s", what)
		}
	}
}

// failure waits for a failed reload whose error contains want. Writers
// that truncate before writing can make a reload fail on a half-written
// file first; such failures are skipped.
func (w *watched) failure(want string) error {
	w.t.Helper()
	deadline := time.After(waitBound)
	for {
		select {
		case err := <-w.events:
			if err != nil && strings.Contains(err.Error(), want) {
				return err
			}
		case <-deadline:
			w.t.Fatalf("no failed reload reported %q", want)
		}
	}
}

func limitOf(domain, key string, rpu uint32) func(*Snapshot) bool {
	return func(s *Snapshot) bool {
		r := s.Match(domain, entries(key+"=x"))
		return r != nil && len(r.Limits) == 1 && r.Limits[0].RequestsPerUnit == rpu
	}
}

func rulesYAML(domain string, rpu int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d}\n", domain, rpu)
}

func TestLoaderFollowsFileChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 1))
	// z keeps the directory from emptying, which a Loader refuses.
	writeFile(t, filepath.Join(dir, "z.yaml"), rulesYAML("z", 1))
	w := startLoader(t, dir)

	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 2))
	w.until("the rewritten limit", limitOf("a", "k", 2))

	writeFile(t, filepath.Join(dir, "b.yml"), rulesYAML("b", 3))
	w.until("the added file", limitOf("b", "k", 3))

	if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
		t.Fatal(err)
	}
	w.until("the removed file gone", func(s *Snapshot) bool { return !s.HasDomain("b") })

	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "a.yaml.bak")); err != nil {
		t.Fatal(err)
	}
	w.until("the file renamed away gone", func(s *Snapshot) bool { return !s.HasDomain("a") })

	// An editor's atomic save: write a temporary file, rename it over.
	writeFile(t, filepath.Join(dir, ".a.yaml.swp"), rulesYAML("a", 4))
	if err := os.Rename(filepath.Join(dir, ".a.yaml.swp"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	w.until("the file renamed in", limitOf("a", "k", 4))
}

func TestLoaderKeepsLastGoodRules(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 1))
	w := startLoader(t, dir)
	good := w.loader.Current()

	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
	w.failure(filepath.Join(dir, "a.yaml") + `:4: descriptors[0].rate_limit.unit: unknown unit "fortnight"`)
	if w.loader.Current() != good || !limitOf("a", "k", 1)(w.loader.Current()) {
		t.Errorf("a bad file replaced the last good rules")
	}

	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 5))
	w.until("the fixed file", limitOf("a", "k", 5))
}

// TestLoaderKeepsRulesWhenAllFilesVanish: an emptied directory is treated
// as a broken mount, not as "drop every limit".
func TestLoaderKeepsRulesWhenAllFilesVanish(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 1))
	w := startLoader(t, dir)
	good := w.loader.Current()
	must(t, os.Remove(filepath.Join(dir, "a.yaml")))
	w.failure("holds no rule files; keeping the last good rules")
	if w.loader.Current() != good {
		t.Errorf("an emptied directory replaced the last good rules")
	}
	writeFile(t, filepath.Join(dir, "b.yaml"), rulesYAML("b", 3))
	w.until("a new file after the empty directory", limitOf("b", "k", 3))
}

func TestReloadWithoutGoodRules(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: [")
	var got []error
	l := NewLoader(dir, Options{OnReload: func(err error) { got = append(got, err) }})
	err := l.Reload()
	if err == nil || len(got) != 1 || got[0] != err {
		t.Errorf("Reload = %v, OnReload got %v; want the same error once", err, got)
	}
	if l.Current() != nil {
		t.Errorf("Current = %v after a failed first load, want nil", l.Current())
	}
	if err := NewLoader(filepath.Join(dir, "missing"), Options{}).Run(context.Background()); err == nil {
		t.Errorf("Run on a missing directory = nil, want an error")
	}
}

// configMap lays out a directory the way the kubelet mounts a ConfigMap:
// the files live in a timestamped directory, "..data" links to it, and each
// key is a symlink "<key> -> ..data/<key>". publish swaps in a new version
// atomically, in the kubelet's order.
type configMap struct {
	t    *testing.T
	dir  string
	gen  int
	keys map[string]bool
	cur  string
}

func (c *configMap) publish(files map[string]string) {
	c.t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_11_29_10_00_%02d.%d", c.gen, 100+c.gen)
	for name, content := range files {
		writeFile(c.t, filepath.Join(c.dir, ts, name), content)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	must(c.t, os.Symlink(ts, tmp))
	must(c.t, os.Rename(tmp, filepath.Join(c.dir, "..data")))
	for name := range files {
		if !c.keys[name] {
			must(c.t, os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)))
		}
	}
	for name := range c.keys {
		if _, ok := files[name]; !ok {
			must(c.t, os.Remove(filepath.Join(c.dir, name)))
		}
	}
	if c.cur != "" {
		must(c.t, os.RemoveAll(filepath.Join(c.dir, c.cur)))
	}
	c.cur = ts
	c.keys = map[string]bool{}
	for name := range files {
		c.keys[name] = true
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoaderFollowsConfigMapSwap(t *testing.T) {
	cm := &configMap{t: t, dir: t.TempDir()}
	cm.publish(map[string]string{"rules.yaml": rulesYAML("edge", 1)})
	w := startLoader(t, cm.dir)
	if !limitOf("edge", "k", 1)(w.loader.Current()) {
		t.Fatalf("initial ConfigMap rules not loaded")
	}

	cm.publish(map[string]string{"rules.yaml": rulesYAML("edge", 2)})
	w.until("the swapped ConfigMap", limitOf("edge", "k", 2))

	cm.publish(map[string]string{"rules.yaml": rulesYAML("edge", 3), "more.yaml": rulesYAML("more", 4)})
	w.until("the key added to the ConfigMap", func(s *Snapshot) bool {
		return limitOf("edge", "k", 3)(s) && limitOf("more", "k", 4)(s)
	})

	cm.publish(map[string]string{"more.yaml": rulesYAML("more", 5)})
	w.until("the key removed from the ConfigMap", func(s *Snapshot) bool {
		return !s.HasDomain("edge") && limitOf("more", "k", 5)(s)
	})

	cm.publish(map[string]string{"more.yaml": "domain: more\ndescriptors: {}\n"})
	w.failure("more.yaml:2: descriptors: got a mapping (want a list of descriptors)")
	if !limitOf("more", "k", 5)(w.loader.Current()) {
		t.Errorf("a bad ConfigMap replaced the last good rules")
	}
}

// A config directory that is itself a symlink, swapped to a new target (as
// envoyproxy/ratelimit's runtime root is deployed).
func TestLoaderFollowsDirectorySymlinkSwap(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "v1", "rules.yaml"), rulesYAML("edge", 1))
	writeFile(t, filepath.Join(root, "v2", "rules.yaml"), rulesYAML("edge", 2))
	link := filepath.Join(root, "current")
	must(t, os.Symlink("v1", link))
	w := startLoader(t, link)

	must(t, os.Symlink("v2", filepath.Join(root, "current.tmp")))
	must(t, os.Rename(filepath.Join(root, "current.tmp"), link))
	w.until("the new target directory", limitOf("edge", "k", 2))

	// Edits in the new target are followed too.
	writeFile(t, filepath.Join(root, "v2", "rules.yaml"), rulesYAML("edge", 3))
	w.until("an edit in the new target", limitOf("edge", "k", 3))
}
