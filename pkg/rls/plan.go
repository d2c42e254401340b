package rls

import (
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// overrideRuleID labels metrics for limits that came from a request's own
// limit override rather than from a configured rule.
const overrideRuleID = "request_override"

// limitView is what a status reports about one applied limit.
type limitView struct {
	name       string
	unit       pb.RateLimitResponse_RateLimit_Unit
	multiplier uint32
	rpu        uint32
}

// checkMeta describes checks[i] for response building and metrics.
type checkMeta struct {
	desc   int
	limit  limitView
	ruleID string
	// limitLabel tells the limits of one rule apart in metrics
	// (rules.Limit.Label).
	limitLabel string
	// path is the rule's rules.Rule.Path, the key of
	// envoyproxy/ratelimit's stats; "" for a request's limit override,
	// whose key there holds the request's values.
	path   string
	shadow bool
	quota  bool
	// soft limits (shadow or quota mode) report but never deny.
	soft bool
}

// overridden is a descriptor's limit override as a check, when ok.
type overridden struct {
	check algo.Check
	meta  checkMeta
	ok    bool
}

// descInfo locates a descriptor's checks in plan.checks.
type descInfo struct {
	first, n  int
	unlimited bool
}

// plan is the per-request working set. It is pooled so that the steady state
// allocates little beyond the response itself.
type plan struct {
	// now is the request's time, read once: both backend runs of a
	// request (see Service.apply) decide at it.
	now        time.Time
	reqEntries []algo.Entry
	keyEntries []algo.Entry
	checks     []algo.Check
	meta       []checkMeta
	decisions  []algo.Decision
	descs      []descInfo
	rules      []*rules.Rule
	replaced   []string
	// overrides[i] is descriptor i's limit override, when it applies.
	overrides        []overridden
	overridesIgnored int
	// batch is what goes to the backend: the selected checks; owner maps
	// each check to its batch entry (-1 when not selected).
	batch []algo.Check
	owner []int
}

func (p *plan) reset() {
	p.now = time.Time{}
	clear(p.reqEntries)
	clear(p.keyEntries)
	clear(p.checks)
	clear(p.meta)
	p.reqEntries = p.reqEntries[:0]
	p.keyEntries = p.keyEntries[:0]
	p.checks = p.checks[:0]
	p.meta = p.meta[:0]
	p.decisions = p.decisions[:0]
	p.descs = p.descs[:0]
	clear(p.rules)
	p.rules = p.rules[:0]
	p.replaced = p.replaced[:0]
	clear(p.overrides)
	p.overrides = p.overrides[:0]
	p.overridesIgnored = 0
	clear(p.batch)
	p.batch = p.batch[:0]
	p.owner = p.owner[:0]
}

// hitsFor resolves the cost of descriptor d: its own hits_addend when set
// (where 0 means check only), else the request's (where 0 means 1).
func hitsFor(req *pb.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(h.GetValue())
	}
	if h := req.GetHitsAddend(); h > 0 {
		return int64(h)
	}
	return 1
}

// build matches every descriptor and fills checks, meta and descs. The
// request must already be validated.
func (p *plan) build(req *pb.RateLimitRequest, snap *rules.Snapshot, known bool, or overrideRules, adjust []LimitAdjuster) error {
	domain := req.GetDomain()
	rulesByDesc := p.rules[:0]
	for i, d := range req.GetDescriptors() {
		start := len(p.reqEntries)
		for _, e := range d.GetEntries() {
			p.reqEntries = append(p.reqEntries, algo.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		var r *rules.Rule
		if known {
			r = snap.Match(domain, p.reqEntries[start:])
		}
		rulesByDesc = append(rulesByDesc, r)
		over := overridden{}
		if known && d.GetLimit() != nil {
			c, m, ok, err := or.check(domain, p.reqEntries[start:len(p.reqEntries):len(p.reqEntries)], d.GetLimit(), r)
			if err != nil {
				return fmt.Errorf("descriptors[%d].limit: %w", i, err)
			}
			if !ok {
				p.overridesIgnored++
			}
			over = overridden{check: c, meta: m, ok: ok}
		}
		p.overrides = append(p.overrides, over)
		if r != nil && !over.ok {
			p.replaced = append(p.replaced, r.Replaces...)
		}
	}

	p.rules = rulesByDesc
	off := 0
	for i, d := range req.GetDescriptors() {
		n := len(d.GetEntries())
		entries := p.reqEntries[off : off+n : off+n]
		off += n
		info := descInfo{first: len(p.checks)}
		hits := hitsFor(req, d)
		refund := d.GetIsNegativeHits()
		r := rulesByDesc[i]
		switch {
		case !known:
			// Unknown domain: no limit applies, as envoyproxy/ratelimit does.
		case p.overrides[i].ok:
			c, m := p.overrides[i].check, p.overrides[i].meta
			c.Hits, c.Refund, c.Charge, m.desc = hits, refund, c.Charge && !refund, i
			p.checks = append(p.checks, c)
			p.meta = append(p.meta, m)
		case r == nil:
		case r.Unlimited:
			info.unlimited = true
		default:
			p.addRuleChecks(domain, entries, r, i, hits, refund, adjust)
		}
		info.n = len(p.checks) - info.first
		p.descs = append(p.descs, info)
	}
	if cap(p.decisions) < len(p.checks) {
		p.decisions = make([]algo.Decision, len(p.checks))
	}
	p.decisions = p.decisions[:len(p.checks)]
	return nil
}

// addRuleChecks adds one check per limit of rule r that no other
// descriptor of the request replaces.
func (p *plan) addRuleChecks(domain string, entries []algo.Entry, r *rules.Rule, desc int, hits int64, refund bool, adjust []LimitAdjuster) {
	ks := len(p.keyEntries)
	p.keyEntries = r.KeyEntries(entries, p.keyEntries)
	keyEntries := p.keyEntries[ks:len(p.keyEntries):len(p.keyEntries)]
	for li := range r.Limits {
		l := &r.Limits[li]
		if l.Name != "" && p.isReplaced(l.Name) {
			continue
		}
		pol, rpu := adjustLimit(adjust, p.now, domain, r, l)
		p.checks = append(p.checks, algo.Check{
			Domain:  domain,
			Entries: keyEntries,
			HashTag: r.HashTag,
			Policy:  pol,
			Hits:    hits,
			Refund:  refund,
			Charge:  l.Charge && !refund,
			Lease:   l.Lease,
			// Queue mode (hold.go decides whether it applies).
			MaxDelay: l.MaxDelay.Microseconds(),
		})
		p.meta = append(p.meta, checkMeta{
			desc:       desc,
			limit:      limitView{name: l.Name, unit: responseUnit(l.Unit), multiplier: l.UnitMultiplier, rpu: rpu},
			ruleID:     r.ID,
			limitLabel: l.Label,
			path:       r.Path,
			shadow:     r.ShadowMode,
			quota:      r.QuotaMode,
			soft:       r.ShadowMode || r.QuotaMode,
		})
	}
}

// cost is the sum of the checks' costs (algo.Check.Cost): the state writes
// the request can cause.
func (p *plan) cost() int64 {
	var sum int64
	for i := range p.checks {
		sum += p.checks[i].Cost()
	}
	return sum
}

// selectChecks fills batch with the checks keep selects. Checks on one
// counter stay apart: every backend merges them (algo.Merge), so each
// reports the merged decision.
func (p *plan) selectChecks(keep func(int) bool) {
	p.batch = p.batch[:0]
	p.owner = p.owner[:0]
	for i := range p.checks {
		if !keep(i) {
			p.owner = append(p.owner, -1)
			continue
		}
		p.batch = append(p.batch, p.checks[i])
		p.owner = append(p.owner, len(p.batch)-1)
	}
}

func (p *plan) isReplaced(name string) bool {
	for _, r := range p.replaced {
		if r == name {
			return true
		}
	}
	return false
}

// deniedBy reports whether a limit that may deny (see soft) denied the
// request: then, all or nothing, no limit consumed its hits.
func (p *plan) deniedBy(soft func(int) bool) bool {
	for i := range p.checks {
		if !p.decisions[i].Allowed && !soft(i) {
			return true
		}
	}
	return false
}

// onlySoftDenied reports whether some limit denied and every denying limit
// is soft.
func (p *plan) onlySoftDenied(soft func(int) bool) bool {
	denied := false
	for i := range p.checks {
		if p.decisions[i].Allowed {
			continue
		}
		if !soft(i) {
			return false
		}
		denied = true
	}
	return denied
}
