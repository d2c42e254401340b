package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Loader keeps the current snapshot of a rule directory and reloads it when
// the directory changes. A failed reload keeps the last good snapshot, and
// a directory that defines no rule counts as failed (see requireRules), so
// once loaded a Loader always serves at least one rule.
// Its methods are safe for concurrent use.
type Loader struct {
	dir  string
	opts Options
	log  *zap.Logger
	cur  atomic.Pointer[Snapshot]

	mu sync.Mutex // serializes reloads; guards the fields below
	// last is the digest of the input of the last reload attempt that read
	// every file, so that events which change nothing cause no reload.
	last    [sha256.Size]byte
	hasLast bool
}

// NewLoader returns a loader for dir. It loads nothing yet: call Load once
// at start-up to fail fast on a bad directory, then Run to follow changes.
func NewLoader(dir string, opts Options) *Loader {
	return &Loader{dir: dir, opts: opts, log: opts.logger()}
}

// Current returns the last successfully loaded snapshot, or nil before the
// first successful load.
func (l *Loader) Current() *Snapshot { return l.cur.Load() }

// Load is the first load, at start-up: like Reload, but a failure is left
// for the caller to report (it has no last good rules to keep, and a
// service should refuse to start), so only success is logged. The result
// is still passed to Options.OnReload.
func (l *Loader) Load() error { return l.reload(true, false) }

// reload reloads the directory; unless force is set, input identical to the
// previous attempt's is skipped silently. logFailure says whether a failure
// is logged here or left to the caller.
func (l *Loader) reload(force, logFailure bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	files, readErr := readDir(l.dir, l.opts)
	sum := digest(files)
	if readErr == nil {
		if !force && l.hasLast && sum == l.last {
			l.log.Debug("rules unchanged", zap.String("dir", l.dir))
			return nil
		}
		l.last, l.hasLast = sum, true
	} else {
		l.hasLast = false
	}
	var snap *Snapshot
	err := readErr
	if files != nil || readErr == nil {
		snap, err = build(files, readErr, l.opts)
	}
	if err == nil {
		err = requireRules(l.dir, files, snap, l.opts.Files)
	}
	switch {
	case err == nil:
		l.cur.Store(snap)
		l.log.Info("rules loaded", zap.String("dir", l.dir), zap.Int("domains", len(snap.names)), zap.Int("rules", snap.rules))
	case !logFailure:
	case l.cur.Load() != nil:
		l.log.Error("rules reload failed, keeping the last good rules", zap.String("dir", l.dir), zap.Error(err))
	default:
		l.log.Error("rules load failed; no rules in force", zap.String("dir", l.dir), zap.Error(err))
	}
	if l.opts.OnReload != nil {
		l.opts.OnReload(err)
	}
	return err
}

// Run watches the directory until ctx is done, reloading after each burst
// of changes: files created, written, removed or renamed, and the
// Kubernetes ConfigMap "..data" symlink swap. It also follows symlinked
// rule files to their real directories, a config directory that is itself
// a symlink, and polls every Options.PollInterval for file systems that
// lose events. It returns nil when ctx is done, or an error if the watch
// cannot be set up.
func (l *Loader) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watch %s: %w", l.dir, err)
	}
	defer w.Close()
	ws := &watchSet{w: w, dir: l.dir, layout: l.opts.Files, have: map[string]bool{}}
	if err := ws.update(); err != nil {
		return fmt.Errorf("rules: watch %s: %w", l.dir, err)
	}
	// Changes made between the caller's first Reload and the watch are
	// caught here; unchanged input is skipped.
	_ = l.reload(false, true)

	var poll <-chan time.Time
	if d := l.opts.pollInterval(); d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		poll = t.C
	}
	debounce := l.opts.debounce()
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	pending := false
	var deadline time.Time // a steady stream of events still reloads by then

	schedule := func() {
		now := time.Now()
		if !pending {
			pending = true
			deadline = now.Add(10 * debounce)
		}
		wait := min(debounce, deadline.Sub(now))
		timer.Reset(max(wait, 0))
	}
	apply := func() {
		// Watch the new layout first: a change after the rewatch raises an
		// event, a change before it is read by the reload.
		if err := ws.update(); err != nil {
			l.log.Warn("rules watch update failed", zap.String("dir", l.dir), zap.Error(err))
		}
		_ = l.reload(false, true)
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("rules: watcher closed")
			}
			l.log.Debug("rules directory changed", zap.String("file", ev.Name), zap.Stringer("op", ev.Op))
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("rules: watcher closed")
			}
			// An overflow loses events: reload to be sure.
			l.log.Warn("rules watch error", zap.String("dir", l.dir), zap.Error(err))
			schedule()
		case <-timer.C:
			pending = false
			apply()
		case <-poll:
			apply()
		}
	}
}

// watchSet keeps the watched directories in line with the directory's
// layout: the directory itself, its parent when the directory is a symlink
// (so that swapping the link is seen), its subdirectories when the layout
// reads them, and the real directories of symlinked rule files that live
// elsewhere.
type watchSet struct {
	w      *fsnotify.Watcher
	dir    string
	target string // where dir resolved to when it was added
	layout FileLayout
	have   map[string]bool
}

func (s *watchSet) update() error {
	want := map[string]bool{}
	target, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return err
	}
	if fi, err := os.Lstat(s.dir); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		want[filepath.Dir(s.dir)] = true
	}
	if s.have[s.dir] && target != s.target {
		// The link now points elsewhere: the old watch follows the old
		// directory, so watch the path afresh.
		_ = s.w.Remove(s.dir)
		delete(s.have, s.dir)
	}
	want[s.dir] = true
	list, err := listFiles(s.dir, s.layout, func(*Error) {})
	if len(list.dirs) == 0 {
		return err
	}
	real := map[string]bool{target: true}
	for _, d := range list.dirs[1:] {
		want[d] = true // subdirectories, in the reference's layout
		if r, err := filepath.EvalSymlinks(d); err == nil {
			real[r] = true
		}
	}
	for _, f := range list.files {
		if fi, err := os.Lstat(f); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		r, err := filepath.EvalSymlinks(f)
		if err != nil {
			continue // dangling; the load reports it
		}
		if d := filepath.Dir(r); !real[d] {
			want[d] = true
		}
	}
	var errs []error
	for d := range s.have {
		if !want[d] {
			_ = s.w.Remove(d) // may already be gone with its directory
			delete(s.have, d)
		}
	}
	for d := range want {
		if s.have[d] {
			continue
		}
		if err := s.w.Add(d); err != nil {
			errs = append(errs, err)
			continue
		}
		s.have[d] = true
	}
	s.target = target
	return errors.Join(errs...)
}
