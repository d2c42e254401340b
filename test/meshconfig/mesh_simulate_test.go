package meshconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// The simulator below computes the descriptors that Envoy's HTTP rate-limit
// filter sends for a request, from the same protos Envoy would load. It
// follows Envoy's documented behaviour for the parts the shipped configs
// use, and returns an error for anything else rather than guessing:
//   - virtual host by :authority ("*", "*.suffix", "prefix.*", exact), then
//     the first route whose match (path, prefix, path_separated_prefix or
//     safe_regex, plus header matchers) accepts the request;
//   - the policies: RateLimitPerRoute.rate_limits if set, else the filter's
//     own rate_limits if set, else the route's rate_limits followed by the
//     virtual host's according to vh_rate_limits (OVERRIDE, the default,
//     uses the virtual host's only when the route has none), keeping those
//     whose stage equals the filter's;
//   - per policy, one entry per action in order; an action that cannot
//     produce its entry drops the whole descriptor, except request_headers
//     and query_parameters with skip_if_absent, which drop only the entry.

// sampleRequest is a request as the rate-limit filter sees it.
type sampleRequest struct {
	remote    string            // the downstream address Envoy trusts
	method    string            // default GET
	authority string            // default "edge.example.com"
	path      string            // path and query, as in :path
	headers   map[string]string // lower-case names
}

func (r sampleRequest) header(name string) (string, bool) {
	switch name = strings.ToLower(name); name {
	case ":method":
		if r.method == "" {
			return "GET", true
		}
		return r.method, true
	case ":path":
		return r.path, r.path != ""
	case ":authority", "host":
		if r.authority == "" {
			return "edge.example.com", true
		}
		return r.authority, true
	case ":scheme":
		return "http", true
	}
	v, ok := r.headers[name]
	return v, ok
}

// pathOnly is :path without the query, which is what route matching sees.
func (r sampleRequest) pathOnly() string {
	p, _, _ := strings.Cut(r.path, "?")
	return p
}

// descriptor is one rate-limit descriptor: its entries in order.
type descriptor []algo.Entry

func (d descriptor) String() string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = fmt.Sprintf("(%q, %q)", e.Key, e.Value)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// simulate returns the descriptors Envoy would send for req.
func simulate(filter *ratelimitv3.RateLimit, vhosts []*routev3.VirtualHost, req sampleRequest) ([]descriptor, error) {
	authority, _ := req.header(":authority")
	vh := selectVirtualHost(vhosts, authority)
	if vh == nil {
		return nil, fmt.Errorf("no virtual host matches authority %q", authority)
	}
	route, err := selectRoute(vh, req)
	if err != nil {
		return nil, err
	}
	if route == nil {
		return nil, fmt.Errorf("virtual host %q: no route matches %s %s", vh.GetName(), req.method, req.path)
	}
	policies, err := policiesFor(filter, vh, route)
	if err != nil {
		return nil, fmt.Errorf("virtual host %q route %q: %w", vh.GetName(), route.GetName(), err)
	}
	var out []descriptor
	for i, p := range policies {
		d, ok, err := applyActions(p.GetActions(), route, req)
		if err != nil {
			return nil, fmt.Errorf("virtual host %q route %q rate_limits[%d]: %w", vh.GetName(), route.GetName(), i, err)
		}
		if ok && len(d) > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

func selectVirtualHost(vhosts []*routev3.VirtualHost, authority string) *routev3.VirtualHost {
	host := strings.ToLower(authority)
	var suffix, prefix, catchAll *routev3.VirtualHost
	for _, vh := range vhosts {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				if catchAll == nil {
					catchAll = vh
				}
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]):
				if suffix == nil {
					suffix = vh
				}
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]):
				if prefix == nil {
					prefix = vh
				}
			}
		}
	}
	switch {
	case suffix != nil:
		return suffix
	case prefix != nil:
		return prefix
	}
	return catchAll
}

func selectRoute(vh *routev3.VirtualHost, req sampleRequest) (*routev3.Route, error) {
	for i, r := range vh.GetRoutes() {
		ok, err := routeMatches(r.GetMatch(), req)
		if err != nil {
			return nil, fmt.Errorf("virtual host %q routes[%d]: %w", vh.GetName(), i, err)
		}
		if ok {
			return r, nil
		}
	}
	return nil, nil
}

func routeMatches(m *routev3.RouteMatch, req sampleRequest) (bool, error) {
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil ||
		m.GetTlsContext() != nil || len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 ||
		len(m.GetCookies()) > 0 {
		return false, errors.New("simulator: unsupported route match criteria")
	}
	path := req.pathOnly()
	fold := m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()
	if fold {
		path = strings.ToLower(path)
	}
	lower := func(s string) string {
		if fold {
			return strings.ToLower(s)
		}
		return s
	}
	var ok bool
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = strings.HasPrefix(path, lower(ps.Prefix))
	case *routev3.RouteMatch_Path:
		ok = path == lower(ps.Path)
	case *routev3.RouteMatch_PathSeparatedPrefix:
		p := lower(ps.PathSeparatedPrefix)
		ok = path == p || strings.HasPrefix(path, p+"/")
	case *routev3.RouteMatch_SafeRegex:
		re, err := fullRegexp(ps.SafeRegex.GetRegex())
		if err != nil {
			return false, err
		}
		ok = re.MatchString(path)
	default:
		return false, fmt.Errorf("simulator: unsupported path specifier %T", ps)
	}
	if !ok {
		return false, nil
	}
	for _, h := range m.GetHeaders() {
		hit, err := headerMatches(h, req)
		if err != nil || !hit {
			return false, err
		}
	}
	return true, nil
}

// policiesFor picks the rate-limit policies that apply to route, in order.
func policiesFor(filter *ratelimitv3.RateLimit, vh *routev3.VirtualHost, route *routev3.Route) ([]*routev3.RateLimit, error) {
	var perRoute *ratelimitv3.RateLimitPerRoute
	if raw, ok := route.GetTypedPerFilterConfig()[rateLimitFilterName]; ok {
		perRoute = &ratelimitv3.RateLimitPerRoute{}
		if err := raw.UnmarshalTo(perRoute); err != nil {
			return nil, fmt.Errorf("typed_per_filter_config[%q]: %w", rateLimitFilterName, err)
		}
	}
	if len(perRoute.GetRateLimits()) > 0 {
		return perRoute.GetRateLimits(), nil
	}
	if len(filter.GetRateLimits()) > 0 {
		return filter.GetRateLimits(), nil
	}
	stage := filter.GetStage()
	var out []*routev3.RateLimit
	add := func(list []*routev3.RateLimit) {
		for _, p := range list {
			if p.GetStage().GetValue() == stage {
				out = append(out, p)
			}
		}
	}
	add(route.GetRoute().GetRateLimits())
	option := perRoute.GetVhRateLimits()
	//lint:ignore SA1019 deprecated, but Envoy still honours it, so the simulator must too
	if route.GetRoute().GetIncludeVhRateLimits().GetValue() {
		option = ratelimitv3.RateLimitPerRoute_INCLUDE
	}
	switch option {
	case ratelimitv3.RateLimitPerRoute_INCLUDE:
		add(vh.GetRateLimits())
	case ratelimitv3.RateLimitPerRoute_OVERRIDE:
		if len(route.GetRoute().GetRateLimits()) == 0 {
			add(vh.GetRateLimits())
		}
	}
	return out, nil
}

// applyActions builds one descriptor; ok is false when an action cannot
// produce its entry and so no descriptor is sent.
func applyActions(actions []*routev3.RateLimit_Action, route *routev3.Route, req sampleRequest) (d descriptor, ok bool, err error) {
	for i, a := range actions {
		switch s := a.GetActionSpecifier().(type) {
		case *routev3.RateLimit_Action_RemoteAddress_:
			if req.remote == "" {
				return nil, false, nil
			}
			d = append(d, algo.Entry{Key: "remote_address", Value: req.remote})
		case *routev3.RateLimit_Action_MaskedRemoteAddress_:
			addr, perr := netip.ParseAddr(req.remote)
			if perr != nil {
				return nil, false, nil
			}
			bits := uint32(32)
			if m := s.MaskedRemoteAddress.GetV4PrefixMaskLen(); m != nil {
				bits = m.GetValue()
			}
			if addr.Is6() {
				bits = 128
				if m := s.MaskedRemoteAddress.GetV6PrefixMaskLen(); m != nil {
					bits = m.GetValue()
				}
			}
			prefix, perr := addr.Prefix(int(bits))
			if perr != nil {
				return nil, false, fmt.Errorf("actions[%d]: %w", i, perr)
			}
			d = append(d, algo.Entry{Key: "masked_remote_address", Value: prefix.String()})
		case *routev3.RateLimit_Action_RequestHeaders_:
			v, present := req.header(s.RequestHeaders.GetHeaderName())
			switch {
			case present:
				d = append(d, algo.Entry{Key: s.RequestHeaders.GetDescriptorKey(), Value: v})
			case !s.RequestHeaders.GetSkipIfAbsent():
				return nil, false, nil
			}
		case *routev3.RateLimit_Action_QueryParameters_:
			_, rawQuery, _ := strings.Cut(req.path, "?")
			q, _ := url.ParseQuery(rawQuery)
			vs, present := q[s.QueryParameters.GetQueryParameterName()]
			switch {
			case present:
				d = append(d, algo.Entry{Key: s.QueryParameters.GetDescriptorKey(), Value: vs[0]})
			case !s.QueryParameters.GetSkipIfAbsent():
				return nil, false, nil
			}
		case *routev3.RateLimit_Action_GenericKey_:
			key := s.GenericKey.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			d = append(d, algo.Entry{Key: key, Value: s.GenericKey.GetDescriptorValue()})
		case *routev3.RateLimit_Action_HeaderValueMatch_:
			hvm := s.HeaderValueMatch
			all := true
			for _, h := range hvm.GetHeaders() {
				hit, herr := headerMatches(h, req)
				if herr != nil {
					return nil, false, fmt.Errorf("actions[%d]: %w", i, herr)
				}
				all = all && hit
			}
			expect := hvm.GetExpectMatch() == nil || hvm.GetExpectMatch().GetValue()
			if all != expect {
				return nil, false, nil
			}
			key := hvm.GetDescriptorKey()
			if key == "" {
				key = "header_match"
			}
			d = append(d, algo.Entry{Key: key, Value: hvm.GetDescriptorValue()})
		case *routev3.RateLimit_Action_DestinationCluster_:
			c := route.GetRoute().GetCluster()
			if c == "" {
				return nil, false, fmt.Errorf("actions[%d]: destination_cluster on a route without a single cluster", i)
			}
			d = append(d, algo.Entry{Key: "destination_cluster", Value: c})
		default:
			return nil, false, fmt.Errorf("actions[%d]: simulator: unsupported action %T", i, s)
		}
	}
	return d, true, nil
}

// headerMatches evaluates a route.v3.HeaderMatcher. A missing header matches
// nothing (whatever invert_match says) unless treat_missing_header_as_empty
// is set; present_match tests presence.
func headerMatches(h *routev3.HeaderMatcher, req sampleRequest) (bool, error) {
	v, present := req.header(h.GetName())
	if !present && h.GetTreatMissingHeaderAsEmpty() {
		v, present = "", true
	}
	if pm, ok := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); ok {
		return present == pm.PresentMatch != h.GetInvertMatch(), nil
	}
	if !present {
		return false, nil
	}
	var hit bool
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_StringMatch:
		var err error
		if hit, err = stringMatches(s.StringMatch, v); err != nil {
			return false, fmt.Errorf("header %q: %w", h.GetName(), err)
		}
	case *routev3.HeaderMatcher_PrefixMatch, *routev3.HeaderMatcher_SuffixMatch,
		*routev3.HeaderMatcher_ContainsMatch, *routev3.HeaderMatcher_ExactMatch:
		return false, fmt.Errorf("header %q: deprecated matcher %T: use string_match", h.GetName(), s)
	case nil:
		hit = true // no specifier: presence alone
	default:
		return false, fmt.Errorf("header %q: simulator: unsupported matcher %T", h.GetName(), s)
	}
	return hit != h.GetInvertMatch(), nil
}

func stringMatches(m *matcherv3.StringMatcher, v string) (bool, error) {
	fold := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return fold(v) == fold(p.Exact), nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix)), nil
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix)), nil
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains)), nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := fullRegexp(p.SafeRegex.GetRegex())
		if err != nil {
			return false, err
		}
		return re.MatchString(v), nil
	}
	return false, fmt.Errorf("simulator: unsupported string matcher %T", m.GetMatchPattern())
}

// fullRegexp compiles an RE2 pattern (Go's regexp is RE2) anchored at both
// ends: Envoy's safe_regex must match the whole value.
func fullRegexp(pattern string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return nil, fmt.Errorf("safe_regex %q: %w", pattern, err)
	}
	return re, nil
}

// sample is a request and the descriptors it must produce, each with the
// rule (rules.Rule.Path) it must reach, or "" for a descriptor that must
// match no rule.
type sample struct {
	name string
	req  sampleRequest
	want []wantDescriptor
}

type wantDescriptor struct {
	entries descriptor
	rule    string
}

// checkSamples simulates every sample against one proxy's configuration and
// checks the descriptors and the rules they reach in snap.
func checkSamples(where string, filter *ratelimitv3.RateLimit, vhosts []*routev3.VirtualHost, snap *rules.Snapshot, samples []sample) error {
	domain := filter.GetDomain()
	if !snap.HasDomain(domain) {
		return fmt.Errorf("%s: the filter's domain %q is not in the rules (have %s)", where, domain, domainNames(snap))
	}
	var errs []error
	for _, s := range samples {
		got, err := simulate(filter, vhosts, s.req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: sample %q: %w", where, s.name, err))
			continue
		}
		if len(got) != len(s.want) {
			errs = append(errs, fmt.Errorf("%s: sample %q: the route actions produce %d descriptors %v, want %d %v",
				where, s.name, len(got), got, len(s.want), wantEntries(s.want)))
			continue
		}
		for i, d := range got {
			w := s.want[i]
			if d.String() != w.entries.String() {
				errs = append(errs, fmt.Errorf("%s: sample %q: descriptor %d is %v, want %v", where, s.name, i, d, w.entries))
				continue
			}
			r := snap.Match(domain, d)
			switch {
			case r == nil && w.rule != "":
				errs = append(errs, fmt.Errorf("%s: sample %q: descriptor %v matches no rule in domain %q, want rule %s",
					where, s.name, d, domain, w.rule))
			case r != nil && r.Path != w.rule:
				want := w.rule
				if want == "" {
					want = "no rule"
				}
				errs = append(errs, fmt.Errorf("%s: sample %q: descriptor %v matches rule %s (%s:%d), want %s",
					where, s.name, d, r.Path, r.File, r.Line, want))
			}
		}
	}
	return errors.Join(errs...)
}

func wantEntries(ws []wantDescriptor) []descriptor {
	out := make([]descriptor, len(ws))
	for i, w := range ws {
		out[i] = w.entries
	}
	return out
}

func domainNames(snap *rules.Snapshot) string {
	var names []string
	for _, d := range snap.Domains() {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}
