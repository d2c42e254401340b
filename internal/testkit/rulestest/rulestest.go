// Package rulestest builds, for tests, rule snapshots from YAML written in
// the test. It fails the test on a file that does not parse or validate.
// It must not be imported by non-test code, and it reads no files: the
// name is only what errors call the file.
package rulestest

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Snapshot parses one rule file, named name, into a snapshot.
func Snapshot(t testing.TB, name, yaml string, opts rules.Options) *rules.Snapshot {
	t.Helper()
	d, err := rules.Parse(name, []byte(yaml), opts)
	if err != nil {
		t.Fatalf("parse rules: %v", err)
	}
	snap, err := rules.NewSnapshot(d)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}
