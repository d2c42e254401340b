package rules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FileLayout says which files of a rule directory are rule files.
//
// The zero value is envoy-rls's own: the *.yaml and *.yml files directly
// in the directory, names starting with a dot skipped.
//
// Reference is envoyproxy/ratelimit's runtime loader: every file under
// the directory, in subdirectories too, whatever its name, so that a
// ConfigMap key without an extension is read. As there, a symlinked file
// is read and a symlinked directory is not entered (it is reported
// through Options.Warn instead); files are read in the order of their
// paths, which is the order MergeDomains joins them in.
//
// DotFiles, with Reference, also reads names that start with a dot, as
// the reference does unless RUNTIME_IGNOREDOTFILES=true. Names starting
// with "..", Kubernetes' own entries of a mounted ConfigMap ("..data" and
// its timestamped target, which hold every key a second time), are
// skipped all the same: reading them would define each domain twice.
type FileLayout struct {
	Reference bool
	DotFiles  bool
}

// String describes the layout for logs.
func (l FileLayout) String() string {
	switch {
	case !l.Reference:
		return "*.yaml and *.yml files of the directory"
	case l.DotFiles:
		return "every file under the directory, subdirectories and dotfiles included"
	}
	return "every file under the directory, subdirectories included, dotfiles skipped"
}

// skip reports whether a name is left out, file or directory.
func (l FileLayout) skip(name string) bool {
	if !l.Reference || !l.DotFiles {
		return strings.HasPrefix(name, ".")
	}
	return strings.HasPrefix(name, "..")
}

// ruleFile reports whether a file's name makes it a rule file.
func (l FileLayout) ruleFile(name string) bool {
	if l.skip(name) {
		return false
	}
	if l.Reference {
		return true
	}
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// listing is what listFiles finds in a rule directory.
type listing struct {
	// files are the rule files' paths, in path order, each under dir as
	// given (not its resolved target).
	files []string
	// dirs are the directories read, dir first: what a watch must watch.
	dirs []string
}

// listFiles finds the rule files of dir under layout l. warn receives
// what the reference would skip with a log line (a symlinked directory);
// a directory that cannot be read is an error.
func listFiles(dir string, l FileLayout, warn func(*Error)) (listing, error) {
	if !l.Reference {
		return listFlat(dir, l)
	}
	// The directory itself may be a symlink (a ConfigMap's mount point
	// seen through one): walk its target, and name files under dir.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return listing{}, fmt.Errorf("rules: read directory: %w", err)
	}
	var out listing
	var errs []error
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, path)
		shown := filepath.Join(dir, rel)
		if err != nil {
			if path == root {
				return fmt.Errorf("rules: read directory: %w", err)
			}
			errs = append(errs, fmt.Errorf("rules: %s: %w", shown, err))
			return nil
		}
		switch {
		case path == root:
			out.dirs = append(out.dirs, dir)
			return nil
		case l.skip(d.Name()) && d.IsDir():
			return filepath.SkipDir
		case d.IsDir():
			out.dirs = append(out.dirs, shown)
			return nil
		case !l.ruleFile(d.Name()):
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				warn(&Error{File: shown, Msg: "a symlink to a directory, not read (as envoyproxy/ratelimit does not read it; want the files themselves, or a link to each)"})
				return nil
			}
		case !d.Type().IsRegular():
			return nil // a socket or device is no configuration
		}
		out.files = append(out.files, shown)
		return nil
	})
	if err != nil {
		return listing{}, err
	}
	return out, errors.Join(errs...)
}

// listFlat is envoy-rls's own layout: the rule files directly in dir,
// symlinks followed.
func listFlat(dir string, l FileLayout) (listing, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return listing{}, fmt.Errorf("rules: read directory: %w", err)
	}
	out := listing{dirs: []string{dir}}
	var errs []error
	for _, e := range entries {
		if !l.ruleFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		// Stat, not the entry's type: a ConfigMap's files are symlinks.
		fi, err := os.Stat(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules: %w", err))
			continue
		}
		if fi.IsDir() {
			continue
		}
		out.files = append(out.files, path)
	}
	return out, errors.Join(errs...)
}

// noFilesError is the error of a directory with no rule file, naming what
// the layout looks for.
func noFilesError(dir string, l FileLayout) error {
	if l.Reference {
		return fmt.Errorf("rules: no rule files in %s (read: %s; want at least one rule)", dir, l)
	}
	return fmt.Errorf("rules: no rule files (*.yaml, *.yml) in %s (want at least one rule)", dir)
}
