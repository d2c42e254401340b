package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxFileSize bounds one rule file; a ConfigMap holds at most 1 MiB, so a
// larger file is a mistake (or a device) rather than a configuration.
const maxFileSize = 16 << 20

type ruleFile struct {
	path string
	data []byte
}

// readDir reads every rule file of dir under the options' layout. It
// returns the files it could read, in path order, and an error for each
// it could not.
func readDir(dir string, opts Options) ([]ruleFile, error) {
	list, err := listFiles(dir, opts.Files, opts.warn)
	if list.files == nil && err != nil {
		return nil, err
	}
	errs := []error{err}
	files := make([]ruleFile, 0, len(list.files))
	for _, path := range list.files {
		data, err := readFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules: %w", err))
			continue
		}
		files = append(files, ruleFile{path: path, data: data})
	}
	return files, errors.Join(errs...)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// digest identifies the input of a load, so that a watcher can skip
// reloading files that did not change.
func digest(files []ruleFile) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, b := range [][]byte{[]byte(f.path), f.data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// build parses files into a snapshot, collecting every problem.
func build(files []ruleFile, readErr error, opts Options) (*Snapshot, error) {
	errs := []error{readErr}
	domains := make([]*Domain, 0, len(files))
	for _, f := range files {
		d, err := Parse(f.path, f.data, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if opts.MergeDomains {
		merged, err := mergeDomains(domains)
		if err != nil {
			return nil, errors.Join(append(errs, err)...)
		}
		domains = merged
	}
	snap, err := NewSnapshot(domains...)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return snap, nil
}

// LoadDir parses every rule file of dir (see FileLayout) into a snapshot. On failure it returns
// every problem in every file.
func LoadDir(dir string, opts Options) (*Snapshot, error) {
	files, err := readDir(dir, opts)
	if files == nil && err != nil {
		return nil, err
	}
	return build(files, err, opts)
}

// requireRules is the policy for a directory the service is to serve: it
// must define at least one rule (a descriptor with rate_limit or
// rate_limits; unlimited: true counts). A Loader refuses anything else, at
// its first load and at every reload, and Validate reports it, so that
// `envoy-rls validate` predicts what a server accepts.
//
// Why refuse rather than serve no limits: an empty directory, or files all
// cut down to "descriptors: []", is far more often a broken mount, a
// half-applied ConfigMap or a templating mistake than an intent to lift
// every limit (a requests_per_unit: 0 block included) on every replica at
// once. Removing a domain, or emptying one file while others still define
// rules, is an ordinary change and applies. The two ways of emptying
// everything (deleting the files, emptying them) are treated alike.
func requireRules(dir string, files []ruleFile, snap *Snapshot, l FileLayout) error {
	switch {
	case snap.NumRules() > 0:
		return nil
	case len(files) == 0:
		return noFilesError(dir, l)
	}
	return fmt.Errorf("rules: no rule in %s (%s, no descriptor with rate_limit or rate_limits; "+
		"want at least one, and to lift every limit keep a rule with unlimited: true)", dir, count(len(files), "rule file"))
}

// Validate checks the rule files in dir as a Loader would load them, for
// `envoy-rls validate`. It returns a one-line summary such as
// "3 domains, 17 rules OK", or every problem found. A directory that
// defines no rule is an error, as it is for a Loader.
func Validate(dir string, opts Options) (summary string, err error) {
	files, err := readDir(dir, opts)
	if files == nil && err != nil {
		return "", err
	}
	snap, err := build(files, err, opts)
	if err != nil {
		return "", err
	}
	if err := requireRules(dir, files, snap, opts.Files); err != nil {
		return "", err
	}
	return summarize(snap), nil
}

// ValidateFile checks the one rule file at path as Validate checks a
// directory's, for `envoy-rls validate FILE`: the file must parse and
// define at least one rule. A merge of domains across files needs the
// directory (Validate).
func ValidateFile(path string, opts Options) (summary string, err error) {
	data, err := readFile(path)
	if err != nil {
		return "", fmt.Errorf("rules: %w", err)
	}
	files := []ruleFile{{path: path, data: data}}
	snap, err := build(files, nil, opts)
	if err != nil {
		return "", err
	}
	if snap.NumRules() == 0 {
		return "", fmt.Errorf("rules: no rule in %s (no descriptor with rate_limit or rate_limits; want at least one)", path)
	}
	return summarize(snap), nil
}

// summarize is Validate's one line: "3 domains, 17 rules, 20 limits OK".
func summarize(snap *Snapshot) string {
	limits := 0
	for _, d := range snap.Domains() {
		for _, r := range d.rules {
			limits += len(r.Limits)
		}
	}
	return fmt.Sprintf("%s, %s, %s OK", count(len(snap.names), "domain"), count(snap.rules, "rule"), count(limits, "limit"))
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
