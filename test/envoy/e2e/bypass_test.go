package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// TestNoPathBypass: every limit the shipped envoy.yaml puts on a path
// (and, in TestNoPathBypassAtTheGateway, the shipped Istio gateway filter)
// holds for every spelling of that path a client can send. Envoy's :path
// carries the query, and an upstream may decode %2F, merge "//" or ignore
// a trailing slash, so a limit keyed on the raw path would let
// /api/login?x=1 through once /api/login is limited. Each case uses up
// its limit (made small in a test copy of examples/config) with the
// canonical path, then sends the variants: each must get 429 from that
// limit, and reach no upstream. A path outside the limited route still
// passes afterwards, so the 429s are the route's, not a blanket refusal.
//
// The variants are decided by Envoy (normalization, routing, the actions),
// not by the store, so the cases run on the in-process store only.
func TestNoPathBypass(t *testing.T) {
	runPathBypassCases(t, stackOpts{})
}

// runPathBypassCases runs the cases on stacks started with base (its
// Store and Rules set here).
func runPathBypassCases(t *testing.T, base stackOpts) {
	t.Helper()
	loginVariants := []string{
		"/api/login?x=1", "/api/login/", "/api/login/?x=1", "/api%2Flogin", "/api%2flogin",
		"//api/login", "/api/./login", "/api/x/../login",
	}
	cases := []struct {
		limit string
		// unit is the small limit's period: longer than the test, and
		// not another limit's of the same rule (login_per_hour's hour).
		unit      string
		method    string
		canonical string
		variants  []string
		// outside is a path the limit must not reach.
		outside string
		// sameClient sends everything from one address, for a limit per
		// client address; otherwise each request has its own, so only the
		// limit under test (counting all clients together) can refuse.
		sameClient bool
	}{
		{limit: "login_per_minute", unit: "day", method: http.MethodPost, canonical: "/api/login",
			variants: loginVariants, outside: "/api/loginx", sameClient: true},
		{limit: "login_path", unit: "hour", method: http.MethodPost, canonical: "/api/login",
			variants: loginVariants, outside: "/api/loginx"},
		{limit: "api_paths", unit: "hour", method: http.MethodGet, canonical: "/api/orders",
			variants: []string{
				"/api/orders?x=1", "/api/orders/", "/api%2Forders", "/api%2forders", "//api/orders",
				"/api/./orders", "/api", "/api?x=1", "/api/", "//api",
			},
			outside: "/apix"},
	}
	const allowed = 2
	for _, c := range cases {
		t.Run(c.limit, func(t *testing.T) {
			o := base
			o.Store, o.Rules = onMemory, smallRules(t, map[string]limitSpec{c.limit: {RPU: allowed, Unit: c.unit}})
			s := startStack(t, o)
			n := 0
			from := func() string {
				n++
				if c.sameClient {
					return "127.0.0.51"
				}
				return fmt.Sprintf("127.0.1.%d", n)
			}
			for i := range allowed {
				if a := s.mustDo(t, request{Method: c.method, Path: c.canonical, From: from()}); a.Status != http.StatusOK {
					t.Fatalf("%s %s #%d: %d, want 200 while within %s", c.method, c.canonical, i+1, a.Status, c.limit)
				}
			}
			for _, p := range append([]string{c.canonical}, c.variants...) {
				a := s.mustDo(t, request{Method: c.method, Path: p, From: from()})
				if a.Status != http.StatusTooManyRequests {
					t.Errorf("%s %s after %s was used up: %d %q, want 429", c.method, p, c.limit, a.Status, a.Body)
				}
			}
			if got, want := len(s.Upstream.Hits()), allowed; got != want {
				t.Errorf("the upstream served %d requests, want the %d within the limit", got, want)
			}
			if got, want := s.limitDecisions(t, c.limit, "over_limit"), float64(1+len(c.variants)); got != want {
				t.Errorf("envoy-rls refused %v requests by %s, want %v: not every 429 was this limit's", got, c.limit, want)
			}
			if a := s.mustDo(t, request{Method: c.method, Path: c.outside, From: from()}); a.Status != http.StatusOK {
				t.Errorf("%s %s, outside the limited route: %d, want 200", c.method, c.outside, a.Status)
			}
		})
	}
}
