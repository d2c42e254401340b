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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
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
	return startLoaderWith(t, dir, Options{})
}

// startLoaderWith is startLoader with opts, whose logger, debounce, poll
// interval and OnReload it sets.
func startLoaderWith(t *testing.T, dir string, opts Options) *watched {
	t.Helper()
	w := &watched{t: t, events: make(chan error, 1000)}
	opts.Logger = zaptest.NewLogger(t)
	opts.Debounce = 20 * time.Millisecond
	opts.PollInterval = -1 // only events may trigger reloads here
	opts.OnReload = func(err error) { w.events <- err }
	w.loader = NewLoader(dir, opts)
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
	// z keeps rules in force, without which a Loader refuses a reload.
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

// TestLoaderReloadPolicy: a reload that would leave no rule is refused and
// the last good rules stay, whether the files were deleted or emptied;
// removing a domain or emptying one file while others keep rules applies.
func TestLoaderReloadPolicy(t *testing.T) {
	const empty = "domain: %s\ndescriptors: []\n"
	block := "domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		// refused is the error a refused reload reports; "" when it applies.
		refused string
		// applied holds for the snapshot once the change applies.
		applied func(*Snapshot) bool
	}{
		{
			name: "every file deleted",
			change: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "a.yaml")))
				must(t, os.Remove(filepath.Join(dir, "z.yaml")))
			},
			refused: "rules: no rule files (*.yaml, *.yml) in ",
		},
		{
			name: "every file emptied",
			change: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "a.yaml"), fmt.Sprintf(empty, "a"))
				writeFile(t, filepath.Join(dir, "z.yaml"), fmt.Sprintf(empty, "z"))
			},
			refused: "(2 rule files, no descriptor with rate_limit or rate_limits;",
		},
		{
			name: "every file deleted but one emptied",
			change: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "a.yaml")))
				writeFile(t, filepath.Join(dir, "z.yaml"), fmt.Sprintf(empty, "z"))
			},
			refused: "(1 rule file, no descriptor",
		},
		{
			name: "one file emptied, another keeps rules",
			change: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "a.yaml"), fmt.Sprintf(empty, "a"))
			},
			applied: func(s *Snapshot) bool {
				return s.HasDomain("a") && s.Match("a", entries("k=x")) == nil && s.NumRules() == 1
			},
		},
		{
			name: "one domain removed",
			change: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "a.yaml")))
			},
			applied: func(s *Snapshot) bool { return !s.HasDomain("a") && s.NumRules() == 1 },
		},
		{
			name: "every limit lifted with unlimited",
			change: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "a.yaml")))
				writeFile(t, filepath.Join(dir, "z.yaml"), "domain: z\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n")
			},
			applied: func(s *Snapshot) bool { r := s.Match("z", entries("k=x")); return r != nil && r.Unlimited },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 1))
			writeFile(t, filepath.Join(dir, "z.yaml"), block)
			w := startLoader(t, dir)
			tt.change(t, dir)
			if tt.applied != nil {
				w.until("the change", tt.applied)
				return
			}
			w.failure(tt.refused)
			// The change may have applied in steps (a.yaml first, which
			// is fine); the block in z.yaml, the last rule, stays.
			if !limitOf("z", "k", 0)(w.loader.Current()) {
				t.Errorf("a reload to no rules dropped the last rule, the requests_per_unit: 0 block")
			}
			writeFile(t, filepath.Join(dir, "b.yaml"), rulesYAML("b", 3))
			w.until("a new rule after the refused reload", limitOf("b", "k", 3))
		})
	}
}

// TestLoadRefusesNoRules: the first load fails the same way on a directory
// without rules, and leaves reporting to the caller: nothing is logged and
// nothing claims last good rules are kept.
func TestLoadRefusesNoRules(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		dir   string // under the temporary directory; "" for itself
		want  string
	}{
		{"missing directory", nil, "nope", "rules: read directory: open "},
		{"no rule files", map[string]string{"notes.txt": "x"}, "", "rules: no rule files (*.yaml, *.yml) in "},
		{"only empty domains", map[string]string{"a.yaml": "domain: a\ndescriptors: []\n"}, "", "(1 rule file, no descriptor"},
		{"a bad file", map[string]string{"a.yaml": "domain: ["}, "", "a.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, data := range tt.files {
				writeFile(t, filepath.Join(root, name), data)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			var got []error
			l := NewLoader(filepath.Join(root, tt.dir), Options{Logger: zap.New(core), OnReload: func(err error) { got = append(got, err) }})
			err := l.Load()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.want)
			}
			if len(got) != 1 || got[0] != err {
				t.Errorf("OnReload got %v, want the error once", got)
			}
			if l.Current() != nil {
				t.Errorf("Current = %v after a failed first load, want nil", l.Current())
			}
			if n := logs.Len(); n != 0 {
				t.Errorf("Load logged %d entries (first %q), want none: the caller reports the failure", n, logs.All()[0].Message)
			}
			// A later Reload has no last good rules either, and says so.
			_ = l.Reload()
			for _, e := range logs.All() {
				if strings.Contains(e.Message, "keeping the last good rules") {
					t.Errorf("Reload without good rules logged %q", e.Message)
				}
			}
		})
	}
	if err := NewLoader(filepath.Join(t.TempDir(), "missing"), Options{}).Run(context.Background()); err == nil {
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
