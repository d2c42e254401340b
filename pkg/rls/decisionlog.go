package rls

import (
	"slices"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// maxLoggedValue bounds each descriptor value (and key) in the decision
// log: values come from requests, so one client must not be able to make
// every log line as long as it likes.
const maxLoggedValue = 64

// logDecision writes the debug line of one decision. Above debug level it
// costs a level check: nothing is built.
func (s *Service) logDecision(req *pb.RateLimitRequest, resp *pb.RateLimitResponse, p *plan) {
	if ce := s.log.Check(zap.DebugLevel, "decision"); ce != nil {
		ce.Write(zap.String("domain", req.GetDomain()), zap.String("code", resp.GetOverallCode().String()),
			zap.Array("descriptors", newDecisionLog(req, resp, p)))
	}
}

// decisionLog is the debug line's "descriptors" field: for each of a
// request's descriptors, its entries, the rule that matched and the code,
// so that "who was limited, by which rule" can be read from the logs. It
// is built only when debug logging is on (zap's Check), and holds its own
// copy of what it reads from the plan, which goes back to the pool before
// a core that keeps fields (a test's observer) may encode them.
type decisionLog struct {
	req  *pb.RateLimitRequest
	resp *pb.RateLimitResponse
	// rules[i] is descriptor i's rule, nil for none; overridden[i] says
	// the request's own limit replaced it.
	rules      []*rules.Rule
	overridden []bool
}

// newDecisionLog copies what the log needs from p.
func newDecisionLog(req *pb.RateLimitRequest, resp *pb.RateLimitResponse, p *plan) decisionLog {
	d := decisionLog{req: req, resp: resp, rules: slices.Clone(p.rules), overridden: make([]bool, len(p.overrides))}
	for i := range p.overrides {
		d.overridden[i] = p.overrides[i].ok
	}
	return d
}

// MarshalLogArray writes one object per descriptor.
func (d decisionLog) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	statuses := d.resp.GetStatuses()
	for i, desc := range d.req.GetDescriptors() {
		l := descriptorLog{entries: desc.GetEntries()}
		if i < len(d.rules) {
			l.rule = d.rules[i]
		}
		l.override = i < len(d.overridden) && d.overridden[i]
		if i < len(statuses) {
			l.code = statuses[i].GetCode()
		}
		if err := enc.AppendObject(l); err != nil {
			return err
		}
	}
	return nil
}

// descriptorLog is one descriptor of the decision log.
type descriptorLog struct {
	entries  []*ratelimitv3.RateLimitDescriptor_Entry
	rule     *rules.Rule
	override bool
	code     pb.RateLimitResponse_Code
}

// MarshalLogObject writes the entries as "key=value" (each part cut to
// maxLoggedValue bytes), the rule (its name, else file:line; the
// request's own limit when it overrode the rule; "none" when nothing
// matched) and the descriptor's code.
func (l descriptorLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	if err := enc.AddArray("entries", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
		for _, e := range l.entries {
			a.AppendString(cut(e.GetKey()) + "=" + cut(e.GetValue()))
		}
		return nil
	})); err != nil {
		return err
	}
	enc.AddString("rule", l.ruleName())
	enc.AddString("code", l.code.String())
	return nil
}

// ruleName names the rule for the log.
func (l descriptorLog) ruleName() string {
	switch {
	case l.override:
		return overrideRuleID
	case l.rule == nil:
		return "none"
	case l.rule.ID != l.rule.Path:
		return l.rule.ID // the rate_limit's name
	}
	return l.rule.File + ":" + strconv.Itoa(l.rule.Line)
}

// cut bounds a logged key or value, marking what it left out. It may cut
// a multi-byte character; zap escapes what is not valid UTF-8.
func cut(s string) string {
	if len(s) <= maxLoggedValue {
		return s
	}
	return s[:maxLoggedValue] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
