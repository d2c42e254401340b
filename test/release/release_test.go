package release

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// buildTimeout bounds the four cross builds on a loaded 2-core machine.
const buildTimeout = 15 * time.Minute

// TestSnapshotRelease builds the release in snapshot mode and checks what
// a user downloads: an archive per platform, their checksums, and a binary
// whose --version names the snapshot.
func TestSnapshotRelease(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goreleaser := filepath.Join(root, "bin", "tools", "goreleaser")
	if _, err := os.Stat(goreleaser); err != nil {
		t.Fatalf("goreleaser not installed (%v): run make test-deps", err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The same configuration, built into a directory of this test's.
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")
	cfgPath := filepath.Join(tmp, "goreleaser.yaml")
	if err := os.WriteFile(cfgPath, append(cfg, []byte("\ndist: "+dist+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goreleaser, "release", "--snapshot", "--clean",
		"--skip=docker,sbom,sign", "--config", cfgPath)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goreleaser release --snapshot: %v\n%s", err, out)
	}

	version := snapshotVersion(t, dist)
	if !strings.Contains(version, "-snapshot-") {
		t.Errorf("snapshot version %q does not say it is a snapshot", version)
	}
	var archives []string
	for _, goos := range []string{"linux", "darwin"} {
		for _, arch := range []string{"amd64", "arm64"} {
			name := "envoy-rls_" + version + "_" + goos + "_" + arch + ".tar.gz"
			if _, err := os.Stat(filepath.Join(dist, name)); err != nil {
				t.Errorf("no archive %s: %v", name, err)
			}
			archives = append(archives, name)
		}
	}
	sums, err := os.ReadFile(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range archives {
		if !bytes.Contains(sums, []byte("  "+a+"\n")) {
			t.Errorf("checksums.txt lacks %s:\n%s", a, sums)
		}
	}

	// The binary built for this machine runs and names the snapshot.
	bins, err := filepath.Glob(filepath.Join(dist, "envoy-rls_"+runtime.GOOS+"_"+runtime.GOARCH+"*", "envoy-rls"))
	if err != nil || len(bins) != 1 {
		t.Fatalf("the %s/%s binary in %s: %v %v", runtime.GOOS, runtime.GOARCH, dist, bins, err)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.CommandContext(ctx, bins[0], args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bins[0], args, err, out)
		}
		if got, want := string(out), "envoy-rls "+version+"\n"; got != want {
			t.Errorf("%v: %q, want %q", args, got, want)
		}
	}
}

// snapshotVersion is the version GoReleaser gave the build, from the
// metadata.json it writes into dist.
func snapshotVersion(t *testing.T, dist string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &meta); err != nil || meta.Version == "" {
		t.Fatalf("dist/metadata.json: version %q, %v", meta.Version, err)
	}
	return meta.Version
}
