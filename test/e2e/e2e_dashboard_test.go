package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/promtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
)

// dashboardFile is the Grafana dashboard whose queries are proven here.
const dashboardFile = "deploy/grafana/envoy-rls.json"

// dashboardVars stand for the dashboard's variables as Grafana fills them
// with "All" (allValue .*) and a rate interval of four 1s scrapes and more.
var dashboardVars = strings.NewReplacer(
	"$__rate_interval", "15s",
	`"$job"`, `".*"`, `"$instance"`, `".*"`, `"$domain"`, `".*"`,
)

// emptyWithoutFault lists dashboard expressions that may rightly return no
// series while nothing is wrong, each with the reason. The test also
// checks each is still on the dashboard, so the list cannot go stale.
// Every expression of the dashboard returns data in this test's setup
// (Redis replica with leases, deny cache and an override; in-process
// store replica on xDS), so it is empty.
var emptyWithoutFault = map[string]string{}

// dashboardRules serve the Redis replica: a hot limit that leases and a
// tight one that denies (and so fills the deny cache).
const dashboardRules = `
domain: dash
descriptors:
  - key: hot
    rate_limit: {name: hot_per_second, unit: second, requests_per_unit: 5000, algorithm: token_bucket, burst: 5000, lease: auto}
  - key: tight
    rate_limit: {name: tight_per_minute, unit: minute, requests_per_unit: 4}
`

// dashboardQueries returns every PromQL expression of the dashboard, with
// its panel's title, and its variables' label_values queries turned into
// the PromQL they run.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(childproc.RepoPath(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out[tg.Expr] = "panel " + p.Title
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := labelValuesQuery(v.Definition)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		out[q] = "variable " + v.Name
	}
	return out
}

type dashPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// labelValuesQuery turns Grafana's label_values(selector, label) into the
// PromQL whose series carry those values.
func labelValuesQuery(def string) (string, error) {
	m := labelValues.FindStringSubmatch(def)
	if m == nil {
		return "", fmt.Errorf("query %q is not label_values(selector, label)", def)
	}
	return fmt.Sprintf("group by (%s) (%s)", m[2], m[1]), nil
}

// TestDashboardQueries proves every query of the Grafana dashboard against
// a real Prometheus scraping two real envoy-rls replicas: one on Redis with
// file rules, leases, the deny cache and a runtime override, one on the
// in-process store with its rules from an xDS server. After traffic, each
// expression, with the dashboard's variables filled in as Grafana does,
// must parse and return data, unless emptyWithoutFault lists it.
func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	queries := dashboardQueries(t)
	checkDashboardCovers(t, queries)
	r := redistest.Standalone(t)
	tok := tokenFile(t, "dash-token")
	a := startServer(t, serveOpts{ConfigDir: rulesDir(t, map[string]string{"dash.yaml": dashboardRules}),
		Args: []string{"--redis-url", "redis://" + r.Addr, "--lease-hot-rps=1", "--lease-ttl=100ms", "--admin-token-file", tok}})
	cp := xdstest.Start(t, nil)
	cp.Set(xdsNode, "v1", xdsLimit(5))
	b := startServer(t, serveOpts{Args: xdsArgs(cp)})
	prom := promtest.Start(t, a.HTTPAddr, b.HTTPAddr)

	sent := dashboardTraffic(t, a, b)
	if _, stderr, code := a.overrideCLI(t, tok, "set", "--domain", "dash", "--limit", "tight_per_minute",
		"--factor", "0.5", "--ttl", "10m", "--reason", "dashboard test"); code != 0 {
		t.Fatalf("override set: exit %d: %s", code, stderr)
	}
	// rate and increase need two samples of a series in their window:
	// wait for three scrapes of each replica as well as the traffic.
	eventually.True(t, "Prometheus has scraped the traffic and the override", func() (bool, string) {
		got, _ := prom.Query(`sum(envoy_rls_requests_total)`)
		ovr, _ := prom.Query(`sum(envoy_rls_overrides_active{source="manual"})`)
		scrapes, _ := prom.Query(`min(count_over_time(up[15s]))`)
		return got >= float64(sent) && ovr == 1 && scrapes >= 3,
			fmt.Sprintf("requests %v of %d, overrides %v, scrapes %v", got, sent, ovr, scrapes)
	})

	client, err := promapi.NewClient(promapi.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(client)
	exprs := make([]string, 0, len(queries))
	for e := range queries {
		exprs = append(exprs, e)
	}
	sort.Strings(exprs)
	for _, e := range exprs {
		q := dashboardVars.Replace(e)
		n, err := seriesCount(api, q)
		_, mayBeEmpty := emptyWithoutFault[e]
		switch {
		case err != nil:
			t.Errorf("%s: %s: %v", queries[e], q, err)
		case n == 0 && !mayBeEmpty:
			t.Errorf("%s: %s returned no data", queries[e], q)
		}
	}
	for e, why := range emptyWithoutFault {
		if _, ok := queries[e]; !ok {
			t.Errorf("emptyWithoutFault lists %q (%s), which the dashboard no longer has", e, why)
		}
	}
}

// dashboardMetrics are the signals the dashboard must show: decisions by
// code and domain, the over-limit ratio, latency, Redis errors and
// breakers, the failure mode, leases, the deny cache, reloads, xDS,
// overrides and the in-process store.
var dashboardMetrics = []string{
	"envoy_rls_requests_total", "envoy_rls_limit_decisions_total", "envoy_rls_request_duration_seconds_bucket",
	"envoy_rls_backend_errors_total", "envoy_rls_backend_breaker_shards", "envoy_rls_backend_failure_mode_total",
	"envoy_rls_lease_local_decisions_total", "envoy_rls_lease_hits_returned_total", "envoy_rls_deny_cache_requests_total",
	"envoy_rls_config_reloads_total", "envoy_rls_config_last_reload_success_timestamp_seconds",
	"envoy_rls_xds_connected", "envoy_rls_xds_nacks_total", "envoy_rls_overrides_active",
	"envoy_rls_memstore_keys", "envoy_rls_memstore_evictions_total",
}

// checkDashboardCovers fails for each of dashboardMetrics no query uses.
func checkDashboardCovers(t *testing.T, queries map[string]string) {
	t.Helper()
	for _, m := range dashboardMetrics {
		used := false
		for e := range queries {
			used = used || regexp.MustCompile(`\b`+m+`\b`).MatchString(e)
		}
		if !used {
			t.Errorf("no dashboard query uses %s", m)
		}
	}
}

// dashboardTraffic drives both replicas and returns the requests sent.
func dashboardTraffic(t *testing.T, a, b *server) int {
	t.Helper()
	sent := 0
	// Hot enough to lease (--lease-hot-rps=1), bounded in count.
	for range 300 {
		a.ask("dash", desc("hot", "h"))
		sent++
	}
	overLimit := 0
	for range 20 {
		if a.ask("dash", desc("tight", "t")).GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
			overLimit++
		}
		sent++
	}
	if overLimit == 0 {
		t.Fatal("no request for tight=t was denied; the over-limit and deny-cache queries would prove nothing")
	}
	for i := range 10 {
		b.ask("api", desc("path", "/a"))
		b.ask("api", desc("path", fmt.Sprintf("/other/%d", i)))
		sent += 2
	}
	return sent
}

// seriesCount evaluates q now and returns how many series (or samples)
// it returned.
func seriesCount(api promv1.API, q string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, _, _, err := api.Query(ctx, q, time.Now())
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case model.Vector:
		return len(v), nil
	case model.Matrix:
		return len(v), nil
	case *model.Scalar, *model.String:
		return 1, nil
	}
	return 0, fmt.Errorf("unexpected result type %T", v)
}
