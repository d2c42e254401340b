package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// requestPath lists the packages a rate-limit decision runs through
// (docs/architecture.md#start-up-and-shutdown: "No request-path package starts a
// goroutine outside the files named there").
var requestPath = []string{
	"pkg/algo", "pkg/rules", "pkg/rls", "pkg/stack", "pkg/redisalgo",
	"pkg/memstore", "pkg/denycache", "pkg/lease", "pkg/failover",
	"pkg/shardmap", "pkg/evict",
}

// goroutineFiles are the request-path files that may start a goroutine,
// each with the reason docs/architecture.md gives.
var goroutineFiles = map[string]string{
	// The batcher's flusher sends what queued while a pipeline was in
	// flight; it ends when the queue is empty, so it owns no goroutine
	// between requests.
	"pkg/redisalgo/batch.go": "the batcher's flusher",
	// The clock's TIME sample goes beside a pipeline on the master's own
	// connection, joined before the call returns.
	"pkg/redisalgo/backend.go": "the clock's TIME sample beside a pipeline",
	// The pipelines of a call's Cluster slots are sent at once and joined.
	"pkg/redisalgo/shard.go": "one pipeline per Cluster slot, joined",
	// The expiry set's sweeper, started with the backend and stopped by
	// its Close: it drops ended windows one shard at a time, so that no
	// request sweeps or waits for a sweep.
	"pkg/redisalgo/expire.go": "the expiry set's sweeper",
	// The per-second Redis and the main one are asked at once and joined.
	"pkg/stack/persecond.go": "the per-second side beside the main side, joined",
	// Run's errgroup: the stack's sweepers, started by the composition
	// root, not by a request.
	"pkg/stack/stack.go": "Run's sweepers",
}

// TestNoGoroutineOnRequestPath: in the request-path packages only the
// files of goroutineFiles start goroutines (a go statement, or a Go method
// of a WaitGroup or errgroup).
func TestNoGoroutineOnRequestPath(t *testing.T) {
	t.Parallel()
	_, dir, _ := listModule(t)
	for _, pkg := range requestPath {
		for _, file := range sourceFiles(t, dir, pkg) {
			name := pkg + "/" + filepath.Base(file)
			if _, ok := goroutineFiles[name]; ok {
				continue
			}
			for _, at := range goroutineStarts(t, file) {
				t.Errorf("%s:%d starts a goroutine on the request path: move it into a file named in test/arch/claims_test.go's goroutineFiles (and docs/architecture.md#start-up-and-shutdown) with the reason", name, at)
			}
		}
	}
}

// goroutineStarts returns the lines of file's go statements and .Go calls.
func goroutineStarts(t *testing.T, file string) []int {
	t.Helper()
	fset, f := parseGo(t, file, nil)
	var lines []int
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			lines = append(lines, fset.Position(n.Pos()).Line)
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" {
				lines = append(lines, fset.Position(n.Pos()).Line)
			}
		}
		return true
	})
	return lines
}

// redisNameFiles are the files outside a key.go that build Redis names,
// each with the reason docs/architecture.md#redis-data-model gives.
var redisNameFiles = map[string]string{}

// What a piece of a Redis name looks like in a string literal: a name
// with a hash tag ("envoy-rls:override:v1:{overrides}"), or words joined by
// ':' that end in one, onto which the rest of a name is joined with +
// (":lock:", "rlqs:"). URLs ("://") and format strings are not names.
var (
	hashTag     = regexp.MustCompile(`^[\w.-]+(:[\w.-]+)*:\{[^\s{}]+\}`)
	joinedPiece = regexp.MustCompile(`^:?[A-Za-z][\w.-]*(:[\w.-]+)*:$`)
)

// TestRedisNamesInKeyFiles: every Redis name is built in a file named
// key.go of the package that owns it (or one of redisNameFiles): outside
// those no string literal holds a hash-tagged name, and none ending or
// starting with ':' is joined on with +.
func TestRedisNamesInKeyFiles(t *testing.T) {
	t.Parallel()
	_, dir, _ := listModule(t)
	for _, top := range []string{"pkg", "cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(dir, top), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == "testkit" {
				return filepath.SkipDir // test support writes no name of the service's
			}
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			name, _ := filepath.Rel(dir, path)
			name = filepath.ToSlash(name)
			if filepath.Base(path) == "key.go" || redisNameFiles[name] != "" || forbidsRedis(filepath.Dir(name)) {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, v := range redisNames(t, name, src) {
				t.Error(v)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// forbidsRedis: pkg's import rule keeps the Redis client out of it, so it
// names no key ("xds:" in pkg/xdsrules names a rule source).
func forbidsRedis(pkg string) bool { return slices.Contains(moduleRules[pkg].forbid, redis) }

// TestClaimChecksFail breaks each mechanical claim once, in a file the
// check reads as source, and wants it named.
func TestClaimChecksFail(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "x.go")
	src := `package x

import "sync"

const key = "envoy-rls:x:v1:{x}"

func f(wg *sync.WaitGroup, name string) string {
	go func() {}()
	wg.Go(func() {})
	return key + ":lock:" + name + "://" + ":"
}
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := goroutineStarts(t, file); !slices.Equal(got, []int{8, 9}) {
		t.Errorf("goroutineStarts = %v, want lines 8 and 9", got)
	}
	got := redisNames(t, "x.go", []byte(src))
	want := []string{`x.go:10 builds a Redis name (":lock:")`, `x.go:5 builds a Redis name ("envoy-rls:x:v1:{x}")`}
	if len(got) != len(want) {
		t.Fatalf("redisNames = %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("redisNames[%d] = %q, want it to start %q", i, got[i], want[i])
		}
	}
}

// redisNames returns one message per literal of src that builds a Redis
// name.
func redisNames(t *testing.T, name string, src []byte) []string {
	t.Helper()
	fset, f := parseGo(t, name, src)
	var out []string
	report := func(lit *ast.BasicLit) {
		out = append(out, name+":"+strconv.Itoa(fset.Position(lit.Pos()).Line)+
			" builds a Redis name ("+lit.Value+"): build it in the key.go of the package that owns it")
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && hashTag.MatchString(s) {
				report(n)
			}
		case *ast.BinaryExpr:
			if n.Op != token.ADD {
				return true
			}
			for _, side := range []ast.Expr{n.X, n.Y} {
				lit, ok := side.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				if s, err := strconv.Unquote(lit.Value); err == nil && joinedPiece.MatchString(s) {
					report(lit)
				}
			}
		}
		return true
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// parseGo parses the Go file name (src, when not nil, is its text).
func parseGo(t *testing.T, name string, src []byte) (*token.FileSet, *ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	var text any
	if src != nil {
		text = src
	}
	f, err := parser.ParseFile(fset, name, text, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fset, f
}

// sourceFiles returns the non-test Go files of the package in dir/pkg.
func sourceFiles(t *testing.T, dir, pkg string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, pkg, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
}
