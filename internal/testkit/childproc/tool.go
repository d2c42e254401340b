package childproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Root returns the repository root: this file lives in
// internal/testkit/childproc. Tests and the bench find the repository's
// files from it, never from the working directory, so a test runs the
// same from any package directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// RepoPath is rel (slash-separated) inside the repository.
func RepoPath(rel string) string {
	return filepath.Join(Root(), filepath.FromSlash(rel))
}

// ReadRepoFile reads rel (slash-separated) inside the repository, failing
// t when it cannot.
func ReadRepoFile(t TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(RepoPath(rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return b
}

// Tool is a program the tests run that the repository does not build.
// Find looks for it under one policy, the same for every tool:
//
//  1. the environment variable Env, when set (a missing file is an error:
//     the caller asked for that one);
//  2. each of Pinned, in order: paths relative to the repository root
//     (where `make test-deps` installs a pinned version under bin/tools or
//     test/bench/.bin; glob patterns allowed) or absolute paths (where a
//     Debian package `make test-deps` installs puts it, /usr/bin, which a
//     minimal PATH may lack);
//  3. each of Path on PATH. A tool whose verdicts depend on its version
//     (Envoy, the reference implementation) names none, so a stray copy
//     of another version is never picked up; point Env at it to use it on
//     purpose.
type Tool struct {
	// Name is what errors call the tool.
	Name string
	// Env names the variable that overrides the search.
	Env string
	// Pinned are the places `make test-deps` installs the tool.
	Pinned []string
	// Path are the names looked up on PATH after Pinned.
	Path []string
	// Install says how to get it, for the error when it is not found.
	Install string
}

// Find returns the tool's path under the policy documented on Tool.
func (tool Tool) Find() (string, error) {
	if tool.Env != "" {
		if p := os.Getenv(tool.Env); p != "" {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s: %s=%s: %w", tool.Name, tool.Env, p, err)
			}
			return p, nil
		}
	}
	for _, pattern := range tool.Pinned {
		if !filepath.IsAbs(pattern) {
			pattern = RepoPath(pattern)
		}
		matches, _ := filepath.Glob(pattern)
		for _, p := range matches {
			if executable(p) {
				return p, nil
			}
		}
	}
	for _, name := range tool.Path {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	msg := tool.Name + " not found"
	if tool.Install != "" {
		msg += " (" + tool.Install
		if tool.Env != "" {
			msg += ", or set " + tool.Env
		}
		msg += ")"
	}
	return "", errors.New(msg)
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
