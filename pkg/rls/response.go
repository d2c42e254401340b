package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// HeaderOptions selects the headers added through response_headers_to_add.
// The zero value adds none, which is the default: Envoy can derive its own
// X-RateLimit headers from the statuses (enable_x_ratelimit_headers).
type HeaderOptions struct {
	// Draft adds the IETF draft RateLimit and RateLimit-Policy fields.
	Draft bool
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset.
	Legacy bool
	// RetryAfter adds Retry-After (seconds) to OVER_LIMIT responses.
	RetryAfter bool
	// LegacyNames renames the Legacy headers (limit, remaining, reset),
	// as envoyproxy/ratelimit's LIMIT_*_HEADER settings do; the zero value
	// keeps the X-RateLimit-* names.
	LegacyNames [3]string
}

// DefaultLegacyNames are the Legacy headers' names when
// HeaderOptions.LegacyNames is zero.
var DefaultLegacyNames = [3]string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// ParseLegacyNames parses the three comma-separated names of the limit,
// remaining and reset headers.
func ParseLegacyNames(s string) ([3]string, error) {
	var out [3]string
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return out, fmt.Errorf("rls: legacy header names %q: want three comma-separated names (limit,remaining,reset)", s)
	}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !isToken(p) {
			return out, fmt.Errorf("rls: legacy header name %q is not a valid HTTP header name", p)
		}
		out[i] = p
	}
	return out, nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header
// name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ParseHeaderOptions parses a comma-separated list of "draft", "legacy",
// "retry-after", or one of "none" and "all".
func ParseHeaderOptions(s string) (HeaderOptions, error) {
	var h HeaderOptions
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(f)) {
		case "", "none":
		case "all":
			h.Draft, h.Legacy, h.RetryAfter = true, true, true
		case "draft":
			h.Draft = true
		case "legacy":
			h.Legacy = true
		case "retry-after":
			h.RetryAfter = true
		default:
			return HeaderOptions{}, fmt.Errorf("rls: unknown header set %q (want draft|legacy|retry-after|all|none)", f)
		}
	}
	return h, nil
}

// mostRestrictive picks the check a descriptor reports: a denying one that
// waits longest, else the one with the least remaining.
func (p *plan) mostRestrictive(first, n int) int {
	best := first
	for k := first + 1; k < first+n; k++ {
		if moreRestrictive(p.decisions[k], p.decisions[best]) {
			best = k
		}
	}
	return best
}

func moreRestrictive(a, b algo.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return retryWait(a) > retryWait(b)
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// retryWait orders denials by their wait, Never last.
func retryWait(d algo.Decision) int64 {
	if d.RetryAfter == algo.Never {
		return math.MaxInt64
	}
	return d.RetryAfter
}

// setResetSeconds sets d, a status's duration_until_reset, to us
// microseconds rounded up to whole seconds. Envoy turns it into the
// X-RateLimit-Reset header by dropping the fraction, so a fraction would
// tell a client one second early, and a client that waits exactly that
// long comes back inside the same window; envoyproxy/ratelimit sends
// whole seconds too. The µs stay in explain, the console and the
// decision log.
func setResetSeconds(d *durationpb.Duration, us int64) {
	d.Seconds, d.Nanos = ceilSeconds(us), 0
}

// inlineStatuses is how many statuses respBlock holds without a separate
// slice: Envoy routes typically send one to three descriptors.
const inlineStatuses = 4

// respBlock is a response with room for the pointers to its first
// statuses, so that both cost one allocation.
type respBlock struct {
	resp pb.RateLimitResponse
	ptrs [inlineStatuses]*pb.RateLimitResponse_DescriptorStatus
}

// statusBlock is one descriptor status with the messages it points to;
// a response allocates all of them as one slice. The response is
// marshalled after the handler returns, so none of this can be pooled.
type statusBlock struct {
	st  pb.RateLimitResponse_DescriptorStatus
	lim pb.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

func clampRemaining(r int64) uint32 {
	switch {
	case r < 0:
		return 0
	case r > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(r)
}

// response builds the answer from the decisions. A rule's shadow and quota
// mode denials are reported as OK; under global shadow mode a denying
// descriptor keeps OVER_LIMIT while the overall code is OK.
func (p *plan) response(req *pb.RateLimitRequest, globalShadow bool, h HeaderOptions) *pb.RateLimitResponse {
	rb := new(respBlock)
	resp := &rb.resp
	resp.OverallCode = pb.RateLimitResponse_OK
	if n := len(p.descs); n <= inlineStatuses {
		resp.Statuses = rb.ptrs[:n:n]
	} else {
		resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, n)
	}
	blocks := make([]statusBlock, len(p.descs))
	headerCheck, retryCheck := -1, -1
	quotaEnabled := false
	var quotaViolations []any
	for di, info := range p.descs {
		blk := &blocks[di]
		st := &blk.st
		st.Code = pb.RateLimitResponse_OK
		resp.Statuses[di] = st
		if info.unlimited {
			st.LimitRemaining = math.MaxUint32
		}
		if info.n == 0 {
			continue
		}
		r := p.mostRestrictive(info.first, info.n)
		d, m := p.decisions[r], p.meta[r]
		blk.lim.Name, blk.lim.RequestsPerUnit, blk.lim.Unit = m.limit.name, m.limit.rpu, m.limit.unit
		st.CurrentLimit = &blk.lim
		if m.limit.multiplier > 1 {
			blk.lim.UnitMultiplier = wrapperspb.UInt32(m.limit.multiplier)
		}
		st.LimitRemaining = clampRemaining(d.Remaining)
		setResetSeconds(&blk.dur, d.ResetAfter)
		st.DurationUntilReset = &blk.dur

		hardDenied, quotaDenied := false, false
		for k := info.first; k < info.first+info.n; k++ {
			quotaEnabled = quotaEnabled || p.meta[k].quota
			if p.decisions[k].Allowed {
				continue
			}
			switch {
			case p.meta[k].quota:
				quotaDenied = true
			case !p.meta[k].soft:
				hardDenied = true
				if retryCheck < 0 || retryWait(p.decisions[k]) > retryWait(p.decisions[retryCheck]) {
					retryCheck = k
				}
			}
		}
		if quotaDenied {
			quotaViolations = append(quotaViolations, float64(di))
		}
		// Global shadow mode keeps the descriptor's OVER_LIMIT, as
		// envoyproxy/ratelimit does, and only the overall code passes.
		if hardDenied {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			if !globalShadow {
				resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			}
		}
		if headerCheck < 0 || moreRestrictive(d, p.decisions[headerCheck]) {
			headerCheck = r
		}
	}
	if quotaEnabled {
		resp.DynamicMetadata = quotaMetadata(req.GetDomain(), quotaViolations)
	}
	if headerCheck >= 0 {
		resp.ResponseHeadersToAdd = p.headers(h, headerCheck, retryCheck, resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT)
	}
	return resp
}

func quotaMetadata(domain string, violations []any) *structpb.Struct {
	if violations == nil {
		violations = []any{}
	}
	s, err := structpb.NewStruct(map[string]any{
		"domain":              domain,
		"quotaModeEnabled":    true,
		"quotaModeViolations": violations,
	})
	if err != nil {
		// Only non-JSON values can fail, and these are strings, bools and numbers.
		return nil
	}
	return s
}

// ceilSeconds rounds µs up to whole seconds, as header consumers expect.
func ceilSeconds(us int64) int64 {
	if us <= 0 {
		return 0
	}
	return (us + algo.Second - 1) / algo.Second
}

func (p *plan) headers(h HeaderOptions, k, retry int, over bool) []*corev3.HeaderValue {
	if !h.Draft && !h.Legacy && !(h.RetryAfter && over) {
		return nil
	}
	d, m := p.decisions[k], &p.meta[k]
	quota, window := headerQuota(p.checks[k].Policy)
	remaining := strconv.FormatInt(max(d.Remaining, 0), 10)
	reset := strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)
	limit := strconv.FormatInt(quota, 10)
	n := 0
	if h.Draft {
		n += 2
	}
	if h.Legacy {
		n += 3
	}
	// A denial that no wait lifts (a limit of 0, or more hits than the
	// capacity) gets no Retry-After: any value would be false.
	retryAfter := h.RetryAfter && over && retry >= 0 && p.decisions[retry].RetryAfter != algo.Never
	if retryAfter {
		n++
	}
	if n == 0 {
		return nil
	}
	// One allocation for the values, one for the pointers.
	vals := make([]corev3.HeaderValue, n)
	out := make([]*corev3.HeaderValue, 0, n)
	add := func(k, v string) {
		hv := &vals[len(out)]
		hv.Key, hv.Value = k, v
		out = append(out, hv)
	}
	if h.Draft {
		name := sfString(policyName(m))
		add("RateLimit-Policy", name+";q="+limit+";w="+strconv.FormatInt(window, 10))
		add("RateLimit", name+";r="+remaining+";t="+reset)
	}
	if h.Legacy {
		names := h.LegacyNames
		if names == ([3]string{}) {
			names = DefaultLegacyNames
		}
		add(names[0], limit)
		add(names[1], remaining)
		add(names[2], reset)
	}
	if retryAfter {
		add("Retry-After", strconv.FormatInt(max(ceilSeconds(p.decisions[retry].RetryAfter), 1), 10))
	}
	return out
}

// headerQuota is the quota the headers announce and the window, in whole
// seconds, it refills over. Remaining counts down from the capacity, so
// the announced quota is the capacity too: for token_bucket and gcra with
// a burst that is the burst, not requests_per_unit, or a header would say
// "limit 20, remaining 39". The window is then the time a full refill
// takes (period × burst / limit), so quota/window is still the long-run
// rate. For every other algorithm it is the limit and its period.
func headerQuota(pol algo.Policy) (quota, windowSeconds int64) {
	quota = pol.Capacity()
	if quota == pol.Limit || pol.Limit <= 0 {
		return quota, ceilSeconds(pol.Period)
	}
	// float64: Period × Burst can pass int64 for long periods, and the
	// result is rounded to whole seconds anyway.
	us := float64(pol.Period) * float64(quota) / float64(pol.Limit)
	return quota, int64(math.Ceil(us / float64(algo.Second)))
}

func policyName(m *checkMeta) string {
	if m.limit.name != "" {
		return m.limit.name
	}
	return m.ruleID
}

// sfString renders s as an RFC 8941 sf-string: printable ASCII only, with
// quotes and backslashes escaped.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
