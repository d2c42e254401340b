package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

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
}

// ParseHeaderOptions parses a comma-separated list of "draft", "legacy",
// "retry-after", or one of "none" and "all".
func ParseHeaderOptions(s string) (HeaderOptions, error) {
	var h HeaderOptions
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(f)) {
		case "", "none":
		case "all":
			h = HeaderOptions{Draft: true, Legacy: true, RetryAfter: true}
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
		return a.ResetAfter > b.ResetAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

func microsToDuration(us int64) *durationpb.Duration {
	if us < 0 {
		us = 0
	}
	return durationpb.New(time.Duration(us) * time.Microsecond)
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
	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(p.descs)),
	}
	headerCheck, retryCheck := -1, -1
	quotaEnabled := false
	var quotaViolations []any
	for di, info := range p.descs {
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		resp.Statuses[di] = st
		if info.unlimited {
			st.LimitRemaining = math.MaxUint32
		}
		if info.n == 0 {
			continue
		}
		r := p.mostRestrictive(info.first, info.n)
		d, m := p.decisions[r], p.meta[r]
		st.CurrentLimit = &pb.RateLimitResponse_RateLimit{
			Name:            m.limit.name,
			RequestsPerUnit: m.limit.rpu,
			Unit:            m.limit.unit,
		}
		if m.limit.multiplier > 1 {
			st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(m.limit.multiplier)
		}
		st.LimitRemaining = clampRemaining(d.Remaining)
		st.DurationUntilReset = microsToDuration(d.ResetAfter)

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
				if retryCheck < 0 || p.decisions[k].ResetAfter > p.decisions[retryCheck].ResetAfter {
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
	d, m, pol := p.decisions[k], p.meta[k], p.checks[k].Policy
	remaining := strconv.FormatInt(max(d.Remaining, 0), 10)
	reset := strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)
	limit := strconv.FormatUint(uint64(m.limit.rpu), 10)
	var out []*corev3.HeaderValue
	add := func(k, v string) { out = append(out, &corev3.HeaderValue{Key: k, Value: v}) }
	if h.Draft {
		name := sfString(policyName(m))
		add("RateLimit-Policy", fmt.Sprintf("%s;q=%s;w=%d", name, limit, ceilSeconds(pol.Period)))
		add("RateLimit", fmt.Sprintf("%s;r=%s;t=%s", name, remaining, reset))
	}
	if h.Legacy {
		add("X-RateLimit-Limit", limit)
		add("X-RateLimit-Remaining", remaining)
		add("X-RateLimit-Reset", reset)
	}
	if h.RetryAfter && over && retry >= 0 {
		add("Retry-After", strconv.FormatInt(max(ceilSeconds(p.decisions[retry].ResetAfter), 1), 10))
	}
	return out
}

func policyName(m checkMeta) string {
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
