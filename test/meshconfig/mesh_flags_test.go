package meshconfig

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// flagDecl matches a flag declared on a flag.FlagSet named fs:
// fs.StringVar(&x, "name", …), fs.Int("name", …), fs.Var(&v, "name", …).
var flagDecl = regexp.MustCompile(`\bfs\.[A-Z][A-Za-z0-9]*\(\s*(?:&[^,"]+,\s*)?"([a-z0-9-]+)"`)

// envTwins returns the ENVOY_RLS_* variables of the flags envoy-rls
// declares (--redis-url → ENVOY_RLS_REDIS_URL).
func envTwins(t testing.TB) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range flagSources(t) {
		for _, m := range flagDecl.FindAllStringSubmatch(string(childproc.ReadRepoFile(t, f)), -1) {
			out["ENVOY_RLS_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d flags in envoy-rls's command line; has the flag declaration style changed?", len(out))
	}
	return out
}

// checkEnvNames reports ENVOY_RLS_* variables that name no flag: envoy-rls
// would silently ignore them.
func checkEnvNames(where string, names []string, known map[string]bool) error {
	var errs []error
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, "ENVOY_RLS_") && !known[n] {
			errs = append(errs, fmt.Errorf("%s: %s is the twin of no envoy-rls flag, so it would be ignored", where, n))
		}
	}
	return errors.Join(errs...)
}

func (c *composeFile) envNames() []string {
	var out []string
	for _, s := range c.Services {
		for n := range s.Environment {
			out = append(out, n)
		}
	}
	return out
}
