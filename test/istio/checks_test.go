package istio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// patchFacts is what a set's EnvoyFilters promise one kind of proxy: the
// rate_limits entries their VIRTUAL_HOST and HTTP_ROUTE patches add, and
// the filters that have a patch for it.
type patchFacts struct {
	filters                 []string
	vhostLimits, routeLimit int
}

// promised reads the patches of the set's EnvoyFilters whose match
// context is ctx (or ANY).
func (s manifestSet) promised(ctx string) (patchFacts, error) {
	var pf patchFacts
	for _, o := range s.envoyFilters() {
		var spec struct {
			ConfigPatches []struct {
				ApplyTo string `json:"applyTo"`
				Match   struct {
					Context string `json:"context"`
				} `json:"match"`
				Patch struct {
					Value struct {
						RateLimits []any `json:"rate_limits"`
						Route      struct {
							RateLimits []any `json:"rate_limits"`
						} `json:"route"`
					} `json:"value"`
				} `json:"patch"`
			} `json:"configPatches"`
		}
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			return pf, fmt.Errorf("%s: %v: %w", s.Name, o, err)
		}
		mine := false
		vh, rt := 0, 0
		for _, p := range spec.ConfigPatches {
			if p.Match.Context != ctx && p.Match.Context != "ANY" && p.Match.Context != "" {
				continue
			}
			mine = true
			switch p.ApplyTo {
			case "VIRTUAL_HOST":
				vh += len(p.Patch.Value.RateLimits)
			case "HTTP_ROUTE":
				rt += len(p.Patch.Value.Route.RateLimits)
			}
		}
		// Which of the filters reach a proxy is istiod's call (their
		// selectors, proxyVersion): a proxy must hold at least what the
		// largest one adds.
		pf.vhostLimits, pf.routeLimit = max(pf.vhostLimits, vh), max(pf.routeLimit, rt)
		if mine {
			pf.filters = append(pf.filters, o.Metadata.Namespace+"/"+o.Metadata.Name)
		}
	}
	return pf, nil
}

// check proves the set on the running mesh: for each gateway and the
// sidecar, istiod pushed and the proxy acknowledged, the config dump
// holds what the EnvoyFilters promise, and traffic is limited. The error
// names the set, the EnvoyFilters, the proxy and what istiod did.
func (m *mesh) check() ([]string, error) {
	var errs []error
	var proven []string
	for i, g := range m.Gateways {
		s, err := m.checkProxy(g, "GATEWAY", m.GatewayPorts[i], net.IPv4(127, 0, 0, byte(1+i)))
		proven, errs = append(proven, s), append(errs, err)
	}
	if m.Sidecar != nil {
		s, err := m.checkProxy(m.Sidecar, "SIDECAR_INBOUND", m.SidecarPort, net.IPv4(127, 0, 0, 1))
		proven, errs = append(proven, s), append(errs, err)
	}
	return proven, errors.Join(errs...)
}

// checkProxy returns what it proved, in a line.
func (m *mesh) checkProxy(p *proxy, ctx string, port int, client net.IP) (string, error) {
	err := m.checkProxyErr(p, ctx, port, client)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%v: pushed and acknowledged, %s right before the router, rate_limits in place, traffic limited", p.Spec, rateLimitFilter), nil
}

func (m *mesh) checkProxyErr(p *proxy, ctx string, port int, client net.IP) error {
	pf, err := m.Set.promised(ctx)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("%s: EnvoyFilters %v on the %v", m.Set.Name, pf.filters, p.Spec)
	if len(pf.filters) == 0 {
		return fmt.Errorf("%s: the set has no EnvoyFilter patch for context %s", where, ctx)
	}
	listener := "_" + strconv.Itoa(port)
	hasListener := func(f dumpFacts) bool {
		return slices.ContainsFunc(f.listeners, func(l string) bool { return strings.HasSuffix(l, listener) })
	}
	// The harness's own config (its listener, the upstream's cluster)
	// arrives in the same push as the set's: once it is there and
	// acknowledged, what the EnvoyFilters did is there too.
	f, err := m.waitSynced(p, func(f dumpFacts) error {
		if !hasListener(f) {
			return fmt.Errorf("no listener *%s yet (listeners %v)", listener, f.listeners)
		}
		if !slices.Contains(f.clusters, "outbound|8000||httpbin.default.svc.cluster.local") {
			return fmt.Errorf("no upstream cluster yet (clusters %v)", f.clusters)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	_, syncedWhy := m.Istiod.synced(p.Spec.ID())
	held, err := m.Istiod.holds(pf.filters)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	did := fmt.Sprintf("istiod accepted %s and pushed to the proxy (%s)", strings.Join(held, ", "), syncedWhy)
	// Every proxy a set is for must end up with the rate-limit filter
	// right before the router, its cluster, and rate_limits.
	var errs []error
	if err := f.rateLimitBeforeRouter(func(l string) bool { return strings.HasSuffix(l, listener) }); err != nil {
		errs = append(errs, err)
	}
	for _, rl := range f.rateLimitFilters {
		rls, _ := rl["rate_limit_service"].(map[string]any)
		gs, _ := rls["grpc_service"].(map[string]any)
		eg, _ := gs["envoy_grpc"].(map[string]any)
		if c, _ := eg["cluster_name"].(string); !slices.Contains(f.clusters, c) {
			errs = append(errs, fmt.Errorf("rate_limit_service cluster %q is not a cluster of the proxy (clusters %v)", c, f.clusters))
		}
	}
	if f.vhostRateLimits+f.routeRateLimits == 0 {
		errs = append(errs, fmt.Errorf("no virtual host or route holds rate_limits (routes %v)", f.routeNames))
	}
	if f.vhostRateLimits < pf.vhostLimits {
		errs = append(errs, fmt.Errorf("the VIRTUAL_HOST patches add %d rate_limits, the proxy's virtual hosts hold %d: the patch's routeConfiguration match selects no virtual host", pf.vhostLimits, f.vhostRateLimits))
	}
	if f.routeRateLimits < pf.routeLimit {
		errs = append(errs, fmt.Errorf("the HTTP_ROUTE patches add %d rate_limits, the proxy's routes (%v) hold %d: the patch's route match selects no route", pf.routeLimit, f.routeNames, f.routeRateLimits))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s, but Envoy's config_dump shows the patches did not land: %w", where, did, errors.Join(errs...))
	}
	domains := map[string]bool{}
	for _, rl := range f.rateLimitFilters {
		d, _ := rl["domain"].(string)
		domains[d] = true
	}
	for d := range domains {
		if err := m.limited(d, port, client); err != nil {
			return fmt.Errorf("%s: %s and the config_dump holds the patches, but traffic through it does not follow the rule: %w", where, did, err)
		}
	}
	return nil
}

// trafficRule is a request a manifest's comment names and the rule (by
// its name in the rules) that limits it: send until the first 429, at most
// max requests; a limit of exactly allowed requests is checked exactly.
type trafficRule struct {
	rule    string
	about   string
	path    string
	header  http.Header
	allowed int // exact number of 200s before the first 429; 0: any
	max     int
}

// trafficRules are, per rate-limit domain, the candidates in order: the
// first whose rule the loaded rules define is used.
var trafficRules = map[string][]trafficRule{
	"edge": {
		// envoyfilter-gateway.yaml: "add the login descriptor on the
		// route named login" → [("generic_key", "login"),
		// ("remote_address", IP)]; rules/edge.yaml login_per_minute: 5
		// per minute, exact (sliding_log).
		{rule: "login_per_minute", about: "5 per minute per client IP on /api/login", path: "/api/login", allowed: 5, max: 6},
		// The chart's default rules: the virtual host's [("remote_address",
		// IP)], per_ip: 50 per second, bursts of 100 (token bucket).
		{rule: "per_ip", about: "50 per second per client IP, bursts of 100", path: "/get", max: 2000},
	},
	// components/sidecar: [("tenant", <x-tenant-id>)], rules/internal.yaml
	// trial_pool: 1000 per hour for trial-* tenants.
	"internal": {{rule: "trial_pool", about: "1000 per hour for trial-* tenants", path: "/get", header: http.Header{"X-Tenant-Id": {"trial-42"}}, max: 1001}},
	// components/per-version: [("version", "unrouted")] when x-version is
	// missing, rules/versions.yaml unrouted: 20 per second.
	"versions": {{rule: "unrouted", about: "20 per second without x-version", path: "/reviews/1", max: 1000}},
}

// trafficRule picks the domain's traffic rule that the mesh's rules define.
func (m *mesh) trafficRule(domain string) (trafficRule, error) {
	files, _ := filepath.Glob(filepath.Join(m.Rules, "*.yaml"))
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return trafficRule{}, err
		}
		if domainOf(string(b)) == domain {
			all.Write(b)
		}
	}
	for _, r := range trafficRules[domain] {
		if strings.Contains(all.String(), "name: "+r.rule+"\n") {
			return r, nil
		}
	}
	return trafficRule{}, fmt.Errorf("no traffic rule for rate-limit domain %q that envoy-rls's rules (%s) define: add one to trafficRules", domain, m.Rules)
}

// limited sends the domain's requests through the listener on port from
// the client address, and checks 200s, then a 429 with
// x-envoy-ratelimited, and that no limited request reached the upstream.
func (m *mesh) limited(domain string, port int, client net.IP) error {
	r, err := m.trafficRule(domain)
	if err != nil {
		return err
	}
	r.rule = domain + " " + r.rule + " (" + r.about + ")"
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: client}}).DialContext,
		DisableKeepAlives: false,
	}}
	defer c.CloseIdleConnections()
	url := "http://127.0.0.1:" + strconv.Itoa(port) + r.path
	before := len(m.Upstream.Hits())
	ok200 := 0
	for i := 0; i < r.max; i++ {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for k, v := range r.header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("%s: request %d: %w", r.rule, i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok200++
			continue
		case http.StatusTooManyRequests:
		default:
			return fmt.Errorf("%s: request %d got %s", r.rule, i+1, resp.Status)
		}
		if resp.Header.Get("x-envoy-ratelimited") != "true" {
			return fmt.Errorf("%s: request %d got 429 without x-envoy-ratelimited: true (headers %v)", r.rule, i+1, resp.Header)
		}
		if ok200 == 0 {
			return fmt.Errorf("%s: the first request was already limited", r.rule)
		}
		if r.allowed > 0 && ok200 != r.allowed {
			return fmt.Errorf("%s: %d requests passed before the first 429, want %d", r.rule, ok200, r.allowed)
		}
		if got := len(m.Upstream.Hits()) - before; got != ok200 {
			return fmt.Errorf("%s: the upstream served %d requests, want the %d that passed", r.rule, got, ok200)
		}
		m.Limited = append(m.Limited, fmt.Sprintf("port %d: %d×200 then 429 by %s", port, ok200, r.rule))
		return nil
	}
	return fmt.Errorf("%s: %d requests, none limited (%d got 200)", r.rule, r.max, ok200)
}

// holds returns the EnvoyFilters (namespace/name) istiod holds among
// names, from /debug/configz, or an error naming those it does not.
func (d *istiod) holds(names []string) ([]string, error) {
	resp, err := http.Get(d.DebugURL + "/debug/configz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var all []struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return nil, fmt.Errorf("istiod /debug/configz: %w", err)
	}
	have := map[string]bool{}
	for _, c := range all {
		if c.Kind == "EnvoyFilter" {
			have[c.Metadata.Namespace+"/"+c.Metadata.Name] = true
		}
	}
	var held, missing []string
	for _, n := range names {
		if have[n] {
			held = append(held, "EnvoyFilter "+n)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return held, fmt.Errorf("istiod does not hold EnvoyFilter %v (rejected when it read the config directory; see its log)", missing)
	}
	return held, nil
}
