package budget

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/refproc"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
)

// referenceRules are both shapes' rule files as Envoy Gateway writes them
// for envoyproxy/ratelimit: a budget of 500 an hour, no algorithm and no
// cost (the reference knows neither; in drop-in mode envoy-rls counts in
// its fixed windows, and with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset
// every limit is cost: charge).
func referenceRules() map[string]string {
	b := budget{Tokens: 500, PeriodSec: 3600, Algorithm: "fixed_window"}
	rules := shapesRules(b)
	for name, data := range rules {
		rules[name] = strings.Replace(data, b.limitYAML(), "{unit: hour, requests_per_unit: 500}", 1)
	}
	return rules
}

// writeReferenceRules lays the rule files out as the reference reads them
// and returns the runtime root.
func writeReferenceRules(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := refproc.RulesDir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range referenceRules() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// rlsDone is how many calls Envoy has completed to its envoy_rls cluster
// (request path and stream done alike).
func rlsDone(t *testing.T, e *envoytest.Envoy) int64 {
	t.Helper()
	s, err := e.Stats("cluster.envoy_rls.upstream_rq_completed")
	if err != nil {
		t.Fatal(err)
	}
	return s["cluster.envoy_rls.upstream_rq_completed"]
}

// side is one service behind its own Envoy.
type side struct {
	envoy *envoytest.Envoy
	url   string
}

// send sends one request of usage tokens and waits until its stream-done
// charge (made for a 200 only: a 429 reports no usage) has been answered,
// so that the next request sees it.
func (s side) send(t *testing.T, path string, header map[string]string, usage int64) int {
	t.Helper()
	before := rlsDone(t, s.envoy)
	c := ask(s.url+path, header, usage, 0, 0)
	if c.Err != nil {
		t.Fatal(c.Err)
	}
	want := before + 1
	if c.Status == http.StatusOK {
		want++
	}
	eventually.True(t, "the request's calls to the rate-limit service", func() (bool, string) {
		got := rlsDone(t, s.envoy)
		return got >= want, fmt.Sprintf("%d, want %d", got, want)
	})
	return c.Status
}

// TestReferenceBudget: the same Envoy (both shapes' bootstrap) in front of
// envoyproxy/ratelimit and in front of envoy-rls in drop-in mode, with the
// same rule file and environment, gives one client, request by request,
// the same statuses, except where docs/budgets.md says they differ:
//
//   - a check-only request (Envoy Gateway's hits_addend 0) on a budget
//     spent to exactly its limit passes the reference (count + 0 is not
//     above the limit) and is denied here (a check-only request is denied
//     exactly when a one-hit request would be);
//   - with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true envoy-rls's limits
//     are cost: request, so a stream-done charge that does not fit is
//     dropped and the budget is never spent by large responses; the
//     reference still adds it to the key that is over the limit (the
//     variable only spares a request's other keys).
func TestReferenceBudget(t *testing.T) {
	refBin, err := refproc.Binary()
	if err != nil {
		t.Fatal(err)
	}
	type statuses struct{ ref, rls []int }
	for _, tc := range []struct {
		name string
		env  []string
		// The sizes of each shape's responses, in order, and the statuses
		// each side answers.
		ai, eg         []int64
		wantAI, wantEG statuses
	}{
		{
			name: "unset",
			// AI Gateway: 1 hit then the charge; the fourth request finds
			// 500 used (1+100+1+150+1+247) and is denied, by both.
			ai:     []int64{100, 150, 247, 60, 40},
			wantAI: statuses{[]int{200, 200, 200, 429, 429}, []int{200, 200, 200, 429, 429}},
			// Envoy Gateway: 100+150+250 is exactly the limit: the fourth
			// check passes there, not here.
			eg:     []int64{100, 150, 250, 60, 300, 40},
			wantEG: statuses{[]int{200, 200, 200, 200, 429, 429}, []int{200, 200, 200, 429, 429, 429}},
		},
		{
			name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
			env:  []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"},
			// The third response's 300 tokens do not fit: the reference
			// counts them and denies from then on; envoy-rls drops them and
			// admits every request, 850 tokens (AI Gateway) and 900 (Envoy
			// Gateway) on a budget of 500.
			ai:     []int64{100, 150, 300, 60, 240},
			wantAI: statuses{[]int{200, 200, 200, 429, 429}, []int{200, 200, 200, 200, 200}},
			eg:     []int64{100, 150, 300, 60, 250, 40},
			wantEG: statuses{[]int{200, 200, 200, 429, 429, 429}, []int{200, 200, 200, 200, 200, 200}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startLLM(t)
			refRedis, rlsRedis := redistest.Standalone(t), redistest.Standalone(t)
			ref := refproc.Start(t, refBin, writeReferenceRules(t), refRedis.Addr, tc.env...)
			dropIn := filepath.Join(t.TempDir(), "ratelimit")
			if err := os.Symlink(binPath, dropIn); err != nil {
				t.Fatal(err)
			}
			env := append(refproc.Env(writeReferenceRules(t), rlsRedis.Addr, 0, 0, 0), tc.env...)
			rls := rlsproc.Start(t, dropIn, nil, env)
			var a, b side
			a.envoy, a.url = startEnvoy(t, "reference", shapesBootstrap(), []string{ref.GRPCAddr}, up.Addr)
			b.envoy, b.url = startEnvoy(t, "envoy-rls", shapesBootstrap(), []string{rls.GRPCAddr}, up.Addr)
			awayFromHourEdge()
			for _, sh := range []shape{aiShape, egShape} {
				sizes, want := tc.ai, tc.wantAI
				if sh.Name == egShape.Name {
					sizes, want = tc.eg, tc.wantEG
				}
				header := sh.Header(strings.ReplaceAll(t.Name(), "/", "-"))
				var got statuses
				for _, n := range sizes {
					got.ref = append(got.ref, a.send(t, sh.Path, header, n))
					got.rls = append(got.rls, b.send(t, sh.Path, header, n))
				}
				t.Logf("%s, sizes %v: reference %v, envoy-rls %v", sh.Name, sizes, got.ref, got.rls)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s, sizes %v: reference %v, envoy-rls %v; want %v and %v", sh.Name, sizes, got.ref, got.rls, want.ref, want.rls)
				}
			}
		})
	}
}
