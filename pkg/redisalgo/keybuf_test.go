package redisalgo

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/backendtest"
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
