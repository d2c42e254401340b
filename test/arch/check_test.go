package arch

import (
	"slices"
	"strings"
	"testing"
)

// TestCheckFailsOnBrokenRule feeds check a small module in which one rule
// at a time is broken, and wants the message that names the package and
// the forbidden import; the clean module must pass.
func TestCheckFailsOnBrokenRule(t *testing.T) {
	t.Parallel()
	const mod = "example.com/m"
	rules := map[string]rule{
		"pkg/core":            {stdlibOnly: true},
		"pkg/store":           {allow: []string{"pkg/core"}, forbid: []string{"google.golang.org/grpc"}},
		"pkg/api":             {allow: []string{"pkg/core"}, forbidDirect: []string{"google.golang.org/grpc"}},
		"pkg/svc":             {allow: []string{"pkg/core"}},
		"internal/testkit/tt": {},
		"test/doc":            {sealed: true},
		"test/e2e":            {sealed: true, testAllow: []string{"internal/testkit/tt"}},
		"cmd/x":               {allow: []string{"*"}},
	}
	clean := func() []goPackage {
		return []goPackage{
			{ImportPath: "fmt", Standard: true},
			{ImportPath: "google.golang.org/grpc"},
			{ImportPath: "example.com/m/pkg/core", Imports: []string{"fmt"}, Deps: []string{"fmt"}},
			{ImportPath: "example.com/m/pkg/store", Imports: []string{"example.com/m/pkg/core"}, Deps: []string{"example.com/m/pkg/core", "fmt"}},
			{ImportPath: "example.com/m/pkg/svc", Imports: []string{"example.com/m/pkg/core", "google.golang.org/grpc"},
				Deps: []string{"example.com/m/pkg/core", "fmt", "google.golang.org/grpc"}, TestImports: []string{"example.com/m/internal/testkit/tt"}},
			{ImportPath: "example.com/m/pkg/api", Imports: []string{"example.com/m/pkg/svc"}, Deps: []string{"example.com/m/pkg/svc", "google.golang.org/grpc"}},
			{ImportPath: "example.com/m/internal/testkit/tt"},
			{ImportPath: "example.com/m/test/doc"},
			{ImportPath: "example.com/m/test/e2e", TestImports: []string{"example.com/m/internal/testkit/tt"}},
			{ImportPath: "example.com/m/cmd/x", Imports: []string{"example.com/m/pkg/svc", "example.com/m/pkg/store"}},
		}
	}
	// pkg/api imports pkg/svc, which its allow-list does not allow: fix
	// that in the clean module's rules so that only each case's edit fails.
	rules["pkg/api"] = rule{allow: []string{"pkg/core", "pkg/svc"}, forbidDirect: []string{"google.golang.org/grpc"}}

	tests := []struct {
		name   string
		mutate func(pkgs []goPackage) []goPackage
		want   string
	}{
		{"allow-list", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/store", func(g *goPackage) { g.Imports = append(g.Imports, "example.com/m/pkg/svc") })
		}, "pkg/store imports pkg/svc, which its allow-list in test/arch/rules_test.go does not allow"},
		{"standard library only", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/core", func(g *goPackage) { g.Deps = append(g.Deps, "google.golang.org/grpc") })
		}, "pkg/core depends on google.golang.org/grpc, but its package doc allows the standard library only"},
		{"forbidden dependency", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/store", func(g *goPackage) { g.Deps = append(g.Deps, "google.golang.org/grpc/codes") })
		}, "pkg/store depends on google.golang.org/grpc/codes, which its package doc forbids"},
		{"forbidden direct import", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/api", func(g *goPackage) { g.Imports = append(g.Imports, "google.golang.org/grpc") })
		}, "pkg/api imports google.golang.org/grpc, which its package doc forbids"},
		{"test support from service code", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/svc", func(g *goPackage) { g.Imports = append(g.Imports, "example.com/m/internal/testkit/tt") })
		}, "pkg/svc imports internal/testkit/tt, which is test support: only _test.go files, test support and test/ may import it"},
		{"composition root and test support", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/cmd/x", func(g *goPackage) { g.Imports = append(g.Imports, "example.com/m/internal/testkit/tt") })
		}, "cmd/x imports internal/testkit/tt, which is test support: only _test.go files, test support and test/ may import it"},
		{"sealed package", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/pkg/svc", func(g *goPackage) { g.XTestImports = append(g.XTestImports, "example.com/m/test/doc") })
		}, "pkg/svc's tests import test/doc, which no package may import"},
		{"test allow-list", func(p []goPackage) []goPackage {
			return edit(p, "example.com/m/test/e2e", func(g *goPackage) { g.TestImports = append(g.TestImports, "example.com/m/pkg/svc") })
		}, "test/e2e's tests import pkg/svc, which its test allow-list in test/arch/rules_test.go does not allow"},
		{"package without an entry", func(p []goPackage) []goPackage {
			return append(p, goPackage{ImportPath: "example.com/m/pkg/new"})
		}, "pkg/new has no entry in test/arch/rules_test.go: add it there with the import rules its package doc states"},
	}
	if got := check(mod, clean(), rules); len(got) != 0 {
		t.Fatalf("clean module: got violations %q, want none", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(mod, tt.mutate(clean()), rules)
			if !slices.Contains(got, tt.want) {
				t.Errorf("violations:\n%s\nwant among them:\n%s", strings.Join(got, "\n"), tt.want)
			}
			if len(got) != 1 {
				t.Errorf("got %d violations, want exactly the one above: %q", len(got), got)
			}
		})
	}
}

// edit applies f to the package named path in pkgs.
func edit(pkgs []goPackage, path string, f func(*goPackage)) []goPackage {
	for i := range pkgs {
		if pkgs[i].ImportPath == path {
			f(&pkgs[i])
		}
	}
	return pkgs
}
