package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
)

// baseLimits shrink every shipped limit that a bounded loop cannot reach
// to 20 in a period longer than any test, so a case's limit under test is
// the only one it reaches and no window or refill moves during it. Rules
// keep their names, keys, algorithms and modes; blocked_ip (0) and
// login_per_minute (5 a minute) are small as shipped and stay as they are.
var baseLimits = map[string]limitSpec{
	"per_ip":             {RPU: 20, Unit: "hour"},
	"user_per_second":    {RPU: 20, Unit: "hour"},
	"user_per_day":       {RPU: 20, Unit: "day"},
	"partner_per_second": {RPU: 20, Unit: "hour"},
	"vip_per_second":     {RPU: 20, Unit: "hour"},
	"login_path":         {RPU: 20, Unit: "hour"},
	"api_paths":          {RPU: 20, Unit: "month"},
	"login_per_hour":     {RPU: 20, Unit: "hour"},
	"user_writes":        {RPU: 20, Unit: "hour"},
}

// smallRules is exampleRules with baseLimits, and then the case's own.
func smallRules(t testing.TB, limits map[string]limitSpec) map[string]string {
	t.Helper()
	all := maps.Clone(baseLimits)
	maps.Copy(all, limits)
	return withLimits(t, exampleRules(t), all)
}

// decisions are the envoy-rls decisions a case expects per limit and code
// (ok, over_limit, not_applied); a code not named must be 0.
type decisions map[string]map[string]float64

var decisionCodes = []string{"ok", "over_limit", "not_applied"}

// TestEveryRateLimitEntryReachesItsRule sends, through Envoy running the
// shipped envoy.yaml, the requests that each rate_limits entry's comment
// names, and checks that they reach that rule of examples/config/edge.yaml:
// by the statuses the client sees (the limit under test is made small in
// a test copy of the rules) and by envoy-rls's per-limit decisions.
func TestEveryRateLimitEntryReachesItsRule(t *testing.T) {
	user := func(id string) map[string]string { return map[string]string{"x-user-id": id} }
	tier := func(tier, id string) map[string]string {
		return map[string]string{"x-user-id": id, "x-api-tier": tier}
	}
	cases := []struct {
		name   string
		limits map[string]limitSpec
		// reqs are sent in turn, sends times in all.
		reqs  []request
		sends int
		// allowed requests pass, then every other one gets 429; -1: all pass.
		allowed int
		want    decisions
		// unlimited is a descriptor (its entries) that the decision log
		// must show matched by a rule (not "none"), for rules that count
		// nothing.
		unlimited []string
	}{{
		name:    "per_ip",
		limits:  map[string]limitSpec{"per_ip": {RPU: 3, Unit: "hour"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.31"}},
		sends:   5,
		allowed: 3,
		want:    decisions{"per_ip": {"ok": 3, "over_limit": 2}},
	}, {
		// The exact address wins over per_ip's key alone.
		name:    "blocked_ip",
		reqs:    []request{{Path: "/hello", From: "127.0.0.66"}},
		sends:   2,
		allowed: 0,
		want:    decisions{"blocked_ip": {"over_limit": 2}, "per_ip": {}},
	}, {
		// The uptime monitor is unlimited: more than per_ip admits pass,
		// and per_ip never sees them.
		name:      "unlimited monitor",
		limits:    map[string]limitSpec{"per_ip": {RPU: 3, Unit: "hour"}},
		reqs:      []request{{Path: "/hello", From: "127.0.0.10"}},
		sends:     6,
		allowed:   -1,
		want:      decisions{"per_ip": {}, "blocked_ip": {}},
		unlimited: []string{"remote_address=127.0.0.10"},
	}, {
		name:    "user_per_second",
		limits:  map[string]limitSpec{"user_per_second": {RPU: 3, Unit: "hour"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.32", Header: user("u-sec")}},
		sends:   5,
		allowed: 3,
		want: decisions{
			"user_per_second": {"ok": 3, "over_limit": 2},
			"user_per_day":    {"ok": 3, "not_applied": 2},
			"per_ip":          {"ok": 3, "not_applied": 2},
		},
	}, {
		name:    "user_per_day",
		limits:  map[string]limitSpec{"user_per_day": {RPU: 3, Unit: "day"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.33", Header: user("u-day")}},
		sends:   4,
		allowed: 3,
		want: decisions{
			"user_per_day":    {"ok": 3, "over_limit": 1},
			"user_per_second": {"ok": 3, "not_applied": 1},
			"per_ip":          {"ok": 3, "not_applied": 1},
		},
	}, {
		// A tier with no rule of its own: user_per_second applies.
		name:    "user_per_second for another tier",
		limits:  map[string]limitSpec{"user_per_second": {RPU: 3, Unit: "hour"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.34", Header: tier("free", "u-free")}},
		sends:   4,
		allowed: 3,
		want: decisions{
			"user_per_second":    {"ok": 3, "over_limit": 1},
			"partner_per_second": {},
			"vip_per_second":     {},
		},
	}, {
		// partner_per_second replaces user_per_second (which the case
		// makes smaller than the partner's: it must not be what limits);
		// user_per_day still counts.
		name:    "partner tier",
		limits:  map[string]limitSpec{"partner_per_second": {RPU: 4, Unit: "hour"}, "user_per_second": {RPU: 2, Unit: "hour"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.35", Header: tier("partner", "u-partner")}},
		sends:   5,
		allowed: 4,
		want: decisions{
			"partner_per_second": {"ok": 4, "over_limit": 1},
			"user_per_second":    {},
			"user_per_day":       {"ok": 4, "not_applied": 1},
			"vip_per_second":     {},
		},
	}, {
		// vip_per_second replaces user_per_second too. Queue mode holds a
		// request only up to max_delay (200ms); this copy's next slot is
		// 15 minutes away, so the fifth is denied at once.
		name:    "vip tier",
		limits:  map[string]limitSpec{"vip_per_second": {RPU: 4, Unit: "hour"}, "user_per_second": {RPU: 2, Unit: "hour"}},
		reqs:    []request{{Path: "/hello", From: "127.0.0.36", Header: tier("vip", "u-vip")}},
		sends:   5,
		allowed: 4,
		want: decisions{
			"vip_per_second":     {"ok": 4, "over_limit": 1},
			"user_per_second":    {},
			"user_per_day":       {"ok": 4, "not_applied": 1},
			"partner_per_second": {},
		},
	}, {
		// login_path counts every client together; it comes from the
		// virtual host's route=login action, which the login route
		// INCLUDEs.
		name:   "login_path",
		limits: map[string]limitSpec{"login_path": {RPU: 3, Unit: "hour"}},
		reqs: []request{
			{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.37"},
			{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.38"},
		},
		sends:   4,
		allowed: 3,
		want: decisions{
			"login_path":       {"ok": 3, "over_limit": 1},
			"login_per_minute": {"ok": 3, "not_applied": 1},
			"api_paths":        {},
		},
	}, {
		// Any other /api path, and every query, share one counter.
		name:   "api_paths",
		limits: map[string]limitSpec{"api_paths": {RPU: 3, Unit: "month"}},
		reqs: []request{
			{Path: "/api/orders", From: "127.0.0.39"},
			{Path: "/api/orders?page=2", From: "127.0.0.39"},
			{Path: "/api/items", From: "127.0.0.40"},
		},
		sends:   5,
		allowed: 3,
		want:    decisions{"api_paths": {"ok": 3, "over_limit": 2}, "login_path": {}},
	}, {
		// /healthz is unlimited: a rule matches its route, none counts it.
		name:      "/healthz unlimited",
		reqs:      []request{{Path: "/healthz", From: "127.0.0.41"}},
		sends:     5,
		allowed:   -1,
		want:      decisions{"per_ip": {"ok": 5}, "api_paths": {}, "login_path": {}},
		unlimited: []string{"route=healthz"},
	}, {
		// As shipped (5 a minute per address). The route's own entry and
		// the virtual host's (vh_rate_limits: INCLUDE) apply together.
		name:    "login_per_minute",
		reqs:    []request{{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.42"}},
		sends:   7,
		allowed: 5,
		want: decisions{
			"login_per_minute": {"ok": 5, "over_limit": 2},
			"login_per_hour":   {"ok": 5, "not_applied": 2},
			"per_ip":           {"ok": 5, "not_applied": 2},
			"login_path":       {"ok": 5, "not_applied": 2},
		},
	}, {
		name:    "login_per_hour",
		limits:  map[string]limitSpec{"login_per_hour": {RPU: 3, Unit: "hour"}},
		reqs:    []request{{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.43"}},
		sends:   4,
		allowed: 3,
		want: decisions{
			"login_per_hour":   {"ok": 3, "over_limit": 1},
			"login_per_minute": {"ok": 3, "not_applied": 1},
		},
	}, {
		// Shadow mode: over the limit is counted, never denied. Reads
		// (GET) are no writes and never reach it.
		name:   "user_writes in shadow mode",
		limits: map[string]limitSpec{"user_writes": {RPU: 2, Unit: "hour"}},
		reqs: []request{
			{Method: http.MethodPost, Path: "/api/items", From: "127.0.0.44", Header: user("u-writer")},
			{Method: http.MethodGet, Path: "/api/items", From: "127.0.0.44", Header: user("u-writer")},
		},
		sends:   8,
		allowed: -1,
		want: decisions{
			"user_writes":     {"ok": 2, "over_limit": 2},
			"user_per_second": {"ok": 8},
		},
	}}
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := startStack(t, stackOpts{Store: st, Rules: smallRules(t, c.limits),
						ServeArgs: []string{"--log-level", "debug"}})
					var got, want []int
					for i := range c.sends {
						a := s.mustDo(t, c.reqs[i%len(c.reqs)])
						got = append(got, a.Status)
						if a.Status == http.StatusOK && a.Body != "ok" {
							t.Errorf("request %d: 200 with body %q, not the upstream's", i+1, a.Body)
						}
						if a.Status == http.StatusTooManyRequests && a.Header.Get("x-envoy-ratelimited") == "" {
							t.Errorf("request %d: 429 without x-envoy-ratelimited: %v", i+1, a)
						}
						if c.allowed < 0 || i < c.allowed {
							want = append(want, http.StatusOK)
						} else {
							want = append(want, http.StatusTooManyRequests)
						}
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("statuses %v, want %v", got, want)
					}
					if n := len(s.Upstream.Hits()); n != countOf(want, http.StatusOK) {
						t.Errorf("the upstream served %d requests, want %d", n, countOf(want, http.StatusOK))
					}
					for _, limit := range slices.Sorted(maps.Keys(c.want)) {
						for _, code := range decisionCodes {
							if got, want := s.limitDecisions(t, limit, code), c.want[limit][code]; got != want {
								t.Errorf("envoy-rls decisions of %s, code %s: %v, want %v", limit, code, got, want)
							}
						}
					}
					if c.unlimited != nil {
						rules := rulesFor(s.decisionLog(t), c.unlimited...)
						if len(rules) != 1 || !s.isUnlimitedRule(t, rules[0]) {
							t.Errorf("descriptor %v matched rules %v in envoy-rls's decision log, want one unlimited rule", c.unlimited, rules)
						}
					}
				})
			}
		})
	}
}

func countOf(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
