package redisalgo

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/backendtest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestUnsafeOnlyInKeyBuf: keybuf.go is the package's one user of unsafe,
// so the lifetime rule its views depend on is stated and kept in one place.
func TestUnsafeOnlyInKeyBuf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "keybuf.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "unsafe" {
				t.Errorf("%s imports unsafe; views of key bytes belong in keybuf.go", f)
			}
		}
	}
}

// TestKeyBufViews: every view reads its own key, with the prefix, after
// later keys were added, and equals AppendKey's bytes.
func TestKeyBufViews(t *testing.T) {
	var k keyBuf
	var want, fields []string
	for i := range 50 { // enough to make the buffer grow under the views
		c := backendtest.UserCheck("dom", strconv.Itoa(i), backendtest.PerMinute(algo.Algorithms[i%len(algo.Algorithms)], 3), 1)
		got := string(k.add("pre:", c, 0, 7))
		key, field := CounterAt("pre:", c, 0, 7)
		want = append(want, key)
		fields = append(fields, field)
		if got != want[i] {
			t.Fatalf("add %d returned %q, want %q", i, got, want[i])
		}
	}
	for i, w := range want {
		if v := k.view(i); v != w {
			t.Errorf("view(%d) = %q, want %q", i, v, w)
		}
		if f := k.field(i); f != fields[i] {
			t.Errorf("field(%d) = %q, want %q", i, f, fields[i])
		}
	}
	k.reset()
	if len(k.b) != 0 || len(k.ends) != 0 {
		t.Errorf("reset left %d bytes, %d keys", len(k.b), len(k.ends))
	}
}

// TestKeyBufSetWindow: a fixed window's hash built for window 0 and then
// named for now with setWindow (Backend.keys and group, which build each
// key once per request) is the name AppendCounterHash gives at now, for
// untagged and hash-tagged counters, long (digested) parts and every
// key around it untouched; its slot is the one of any window.
func TestKeyBufSetWindow(t *testing.T) {
	long := strings.Repeat("v", 3*maxPart)
	tagged := backendtest.UserCheck("dom", "alice", backendtest.PerMinute(algo.FixedWindow, 3), 1)
	tagged.HashTag = 0
	checks := []algo.Check{
		backendtest.UserCheck("dom", "alice", backendtest.PerMinute(algo.FixedWindow, 3), 1),
		backendtest.UserCheck("dom", long, backendtest.PerMinute(algo.TokenBucket, 3), 1),
		backendtest.UserCheck(long, long, algo.Policy{Algorithm: algo.FixedWindow, Limit: 3, Period: algo.Second}, 1),
		tagged,
	}
	for _, now := range []int64{0, 1, t0.UnixMicro(), t0.UnixMicro() + 59*algo.Second, 1 << 60} {
		var k keyBuf
		for _, c := range checks {
			k.add("pre:", c, 0, 7)
		}
		for i, c := range checks {
			before := keySlot([]byte(k.view(i)))
			if c.Policy.KeyedWindow() {
				k.setWindow(i, c.Policy, now)
			}
			if got := keySlot([]byte(k.view(i))); got != before {
				t.Errorf("at %d, check %d: slot %d after setWindow, %d before", now, i, got, before)
			}
		}
		for i, c := range checks {
			if want, _ := CounterAt("pre:", c, now, 7); k.view(i) != want {
				t.Errorf("at %d, check %d: %q, want %q", now, i, k.view(i), want)
			}
		}
	}
}
