package rules

import (
	"fmt"
	"math"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// singleLimit parses a rate_limit block, which may be unlimited.
func (p *parser) singleLimit(n *yaml.Node, path string, r *Rule) bool {
	m := p.mapping(n, path, "a mapping with unit and requests_per_unit, or unlimited: true")
	if m == nil {
		return false
	}
	f := p.fields(m, path, rateLimitFields)
	unlimited := false
	if un, ok := f["unlimited"]; ok {
		unlimited, _ = p.boolean(un, path+".unlimited")
	}
	name := p.limitName(f, path)
	r.ID = name
	if unlimited {
		ok := true
		for _, k := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm", "burst", "sub_windows", "lease", "warmup", "on_limit", "max_delay", "cost"} {
			if kn, has := f[k]; has {
				p.errorf(kn.Line, path+"."+k, "set together with unlimited: true (want either unlimited or a limit)")
				ok = false
			}
		}
		r.Unlimited = true
		r.Replaces = p.replaces(f, path, []string{name}, r.Replaces)
		return ok
	}
	l, ok := p.limit(f, m.Line, path, name)
	if !ok {
		p.replaces(f, path, []string{name}, nil)
		return false
	}
	l.Label = limitLabel(name, "rate_limit")
	r.Limits = []Limit{l}
	r.Replaces = p.replaces(f, path, []string{name}, r.Replaces)
	return true
}

// limitList parses the rate_limits extension: several limits, all applied.
func (p *parser) limitList(n *yaml.Node, path string, r *Rule) bool {
	items := p.sequence(n, path, "a list of rate limits")
	if len(items) == 0 {
		p.errorf(n.Line, path, "empty (want at least one rate limit)")
		return false
	}
	ok := true
	type parsed struct {
		f    map[string]*yaml.Node
		path string
	}
	var all []parsed
	var names []string
	var positions []int // list position of each parsed limit in r.Limits
	for i, item := range items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		m := p.mapping(item, ip, "a mapping with unit and requests_per_unit")
		if m == nil {
			ok = false
			continue
		}
		f := p.fields(m, ip, rateLimitFields)
		if un, has := f["unlimited"]; has {
			p.errorf(un.Line, ip+".unlimited", "not allowed in rate_limits (want rate_limit: {unlimited: true} instead of a list)")
			ok = false
		}
		name := p.limitName(f, ip)
		if name != "" {
			names = append(names, name)
		}
		l, lok := p.limit(f, m.Line, ip, name)
		if !lok {
			ok = false
		} else {
			for j, prev := range r.Limits {
				if prev.Policy.SharesCounter(l.Policy) {
					p.errorf(m.Line, ip, "same algorithm (%s) and period as %s[%d], so both would count in one key (want a different algorithm or period, or one limit)",
						l.Policy.Algorithm, path, positions[j])
					ok = false
				}
			}
			l.Label = limitLabel(name, fmt.Sprintf("rate_limits[%d]", i))
			r.Limits = append(r.Limits, l)
			positions = append(positions, i)
		}
		all = append(all, parsed{f, ip})
	}
	for _, a := range all {
		r.Replaces = p.replaces(a.f, a.path, names, r.Replaces)
	}
	return ok
}

// limitLabel is a limit's Label: its name, else where it stands in its
// descriptor.
func limitLabel(name, position string) string {
	if name != "" {
		return name
	}
	return position
}

// limitName reads a rate limit's optional name.
func (p *parser) limitName(f map[string]*yaml.Node, path string) string {
	name := ""
	if nn, has := f["name"]; has {
		name, _ = p.str(nn, path+".name")
	}
	return name
}

// limit parses the numeric part of a rate limit; line is the rate limit's,
// for missing fields. Every field is read, so that each bad one is
// reported, before the limit as a whole is judged.
func (p *parser) limit(f map[string]*yaml.Node, line int, path, name string) (Limit, bool) {
	unit, unitOK := p.limitUnit(f, line, path)
	rpu, rpuOK := p.requestsPerUnit(f, line, path)
	mult, multOK := p.unitMultiplier(f, path, unit)
	alg, algOK := p.limitAlgorithm(f, path)
	burst, burstOK := p.burst(f, path, alg)
	subs, subsOK := p.subWindows(f, path, alg, unit.Micros()*int64(mult))
	lease, leaseOK := p.lease(f, path, alg)
	warmup, warmupOK := p.warmup(f, path)
	maxDelay, delayOK := p.onLimit(f, line, path, alg, lease)
	charge, costOK := p.cost(f, path, lease, maxDelay > 0)
	l := Limit{Name: name, Unit: unit, UnitMultiplier: mult, RequestsPerUnit: rpu, Lease: lease, Warmup: warmup, MaxDelay: maxDelay, Charge: charge}
	if !(unitOK && rpuOK && multOK && algOK && burstOK && subsOK && leaseOK && warmupOK && delayOK && costOK) {
		return l, false
	}
	if alg == algo.SlidingLog && int64(rpu) > p.opts.slidingLogCap() {
		p.aboveLogCap(f, line, path, rpu)
		return l, false
	}
	if burst == 0 && alg.UsesBurst() {
		burst = int64(rpu)
	}
	l.Policy = algo.Policy{
		Algorithm:  alg,
		Limit:      int64(rpu),
		Period:     unit.Micros() * int64(mult),
		Burst:      burst,
		SubWindows: subs,
	}
	return l, p.validatePolicy(l.Policy, line, path)
}

func (p *parser) limitUnit(f map[string]*yaml.Node, line int, path string) (algo.Unit, bool) {
	un, has := f["unit"]
	if !has {
		p.errorf(line, path+".unit", "missing (want %s)", algo.UnitNames())
		return 0, false
	}
	return named(p, un, path+".unit", "unit", algo.UnitNames(), algo.ParseUnit)
}

func (p *parser) requestsPerUnit(f map[string]*yaml.Node, line int, path string) (uint32, bool) {
	const want = "an integer 0..4294967295; 0 blocks every request"
	rn, has := f["requests_per_unit"]
	if !has && p.opts.ZeroMissingRequestsPerUnit {
		p.opts.warn(&Error{File: p.file, Line: line, Path: path + ".requests_per_unit",
			Msg: "missing, read as 0 as envoyproxy/ratelimit reads it: every request is denied (want requests_per_unit set)"})
		return 0, true
	}
	if !has {
		p.errorf(line, path+".requests_per_unit", "missing (want %s)", want)
		return 0, false
	}
	v, ok := p.integer(rn, path+".requests_per_unit", 0, math.MaxUint32, want)
	return uint32(v), ok
}

// unitMultiplier reads the unit_multiplier (1 when absent), which must not
// overflow the period in microseconds. unit is 0 when it is bad; the
// overflow is then not judged.
func (p *parser) unitMultiplier(f map[string]*yaml.Node, path string, unit algo.Unit) (uint32, bool) {
	mn, has := f["unit_multiplier"]
	if !has {
		return 1, true
	}
	v, ok := p.integer(mn, path+".unit_multiplier", 1, math.MaxUint32, "an integer 1..4294967295")
	if us := unit.Micros(); ok && us > 0 && v > math.MaxInt64/us {
		p.errorf(mn.Line, path+".unit_multiplier", "%d %ss overflow the period (want at most %d)", v, unit, math.MaxInt64/us)
		return uint32(v), false
	}
	return uint32(v), ok
}

// limitAlgorithm reads the algorithm, the server default when absent.
func (p *parser) limitAlgorithm(f map[string]*yaml.Node, path string) (algo.Algorithm, bool) {
	an, has := f["algorithm"]
	if !has {
		return p.opts.defaultAlgorithm(), true
	}
	return named(p, an, path+".algorithm", "algorithm", algo.AlgorithmNames(), algo.ParseAlgorithm)
}

// named reads n as a name that parse knows, in any case: what says what
// kind of name it is and want lists the names, for the error.
func named[T any](p *parser, n *yaml.Node, path, what, want string, parse func(string) (T, error)) (T, bool) {
	var zero T
	s, ok := p.str(n, path)
	if !ok {
		return zero, false
	}
	v, err := parse(strings.ToLower(s))
	if err != nil {
		p.errorf(n.Line, path, "unknown %s %q (want %s)", what, s, want)
		return zero, false
	}
	return v, true
}

// cost reads `cost: request | charge` (Options.DefaultCharge decides when
// absent). A charge is counted even past the limit, which neither a lease
// (it hands out hits the shared state already holds) nor queue mode (it
// waits for room) can do, so either refuses an explicit charge and keeps
// the default from making one.
func (p *parser) cost(f map[string]*yaml.Node, path string, lease, delay bool) (bool, bool) {
	cn, has := f["cost"]
	if !has {
		return p.opts.DefaultCharge && !lease && !delay, true
	}
	s, ok := p.str(cn, path+".cost")
	if !ok {
		return false, false
	}
	switch strings.ToLower(s) {
	case "request":
		return false, true
	case "charge":
	default:
		p.errorf(cn.Line, path+".cost", "unknown cost %q (want request|charge)", s)
		return false, false
	}
	switch {
	case lease:
		p.errorf(cn.Line, path+".cost", "charge with lease: auto: a lease cannot count hits past the limit (want one of them)")
		return false, false
	case delay:
		p.errorf(cn.Line, path+".cost", "charge with on_limit: delay: a charge is counted at once, it never waits (want one of them)")
		return false, false
	}
	return true, true
}

// lease reads `lease: auto | off` (off when absent). auto lets a replica
// take leases on the limit's hot counters; only the algorithms the table
// lets lease (algo.Spec.MayLease) take it. alg is 0 when it is bad; the
// lease is then not judged against it.
func (p *parser) lease(f map[string]*yaml.Node, path string, alg algo.Algorithm) (bool, bool) {
	ln, has := f["lease"]
	if !has {
		return false, true
	}
	s, ok := p.str(ln, path+".lease")
	if !ok {
		return false, false
	}
	switch strings.ToLower(s) {
	case "off":
		return false, true
	case "auto":
	default:
		p.errorf(ln.Line, path+".lease", "unknown lease mode %q (want auto|off)", s)
		return false, false
	}
	if spec, _ := alg.Spec(); alg != 0 && !spec.MayLease {
		p.errorf(ln.Line, path+".lease", "auto for algorithm %s, whose bound a lease cannot keep (want lease only with %s)", alg, algo.ListNames(algo.Where(algo.Spec.Leasable)))
		return false, false
	}
	return true, true
}

// burst reads the burst (0 when absent), which only algorithms with a
// bucket take. alg is 0 when it is bad; the burst is then not judged
// against it.
func (p *parser) burst(f map[string]*yaml.Node, path string, alg algo.Algorithm) (int64, bool) {
	bn, has := f["burst"]
	if !has {
		return 0, true
	}
	v, ok := p.integer(bn, path+".burst", 1, math.MaxUint32, "an integer 1..4294967295")
	if ok && alg != 0 && !alg.UsesBurst() {
		p.errorf(bn.Line, path+".burst", "set for algorithm %s (want burst only with %s)", alg, burstAlgorithms())
		return v, false
	}
	return v, ok
}

// burstAlgorithms names the algorithms that take a burst, "token_bucket or
// gcra", as the algorithm table defines them.
func burstAlgorithms() string { return algo.ListNames(algo.Where(algo.Spec.Bursting)) }

// aboveLogCap reports a sliding_log limit above the cap at its
// requests_per_unit, in words that say why the cap exists; algo's own
// check (validatePolicy) would only name the numbers.
func (p *parser) aboveLogCap(f map[string]*yaml.Node, line int, path string, rpu uint32) {
	if rn := f["requests_per_unit"]; rn != nil {
		line = rn.Line
	}
	c := p.opts.slidingLogCap()
	p.errorf(line, path+".requests_per_unit", "%d is above the sliding_log cap of %d, the log keeps one entry per hit (want at most %d, or another algorithm)",
		rpu, c, c)
}

// validatePolicy defers to the algorithms' own view of what they compute
// exactly; errors.Join'ed reasons become one problem each.
func (p *parser) validatePolicy(pol algo.Policy, line int, path string) bool {
	err := pol.ValidateWithLogCap(p.opts.slidingLogCap())
	if err == nil {
		return true
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		p.errorf(line, path, "%v", e)
	}
	return false
}

// replaces parses a rate limit's replaces list and appends the names to
// dst. own are the names of the rule's limits, which it must not replace.
func (p *parser) replaces(f map[string]*yaml.Node, path string, own []string, dst []string) []string {
	n, ok := f["replaces"]
	if !ok {
		return dst
	}
	path += ".replaces"
	for i, item := range p.sequence(n, path, "a list of {name: …}") {
		ip := fmt.Sprintf("%s[%d]", path, i)
		m := p.mapping(item, ip, "a mapping with name")
		if m == nil {
			continue
		}
		rf := p.fields(m, ip, replacesFields)
		nn, has := rf["name"]
		if !has {
			p.errorf(m.Line, ip+".name", "missing (want the name of another rate limit)")
			continue
		}
		name, sok := p.str(nn, ip+".name")
		switch {
		case !sok:
		case name == "":
			p.errorf(nn.Line, ip+".name", "empty (want the name of another rate limit)")
		case contains(own, name):
			p.errorf(nn.Line, ip+".name", "replaces its own rate limit %q (want the name of another rate limit)", name)
		default:
			dst = append(dst, name)
		}
	}
	return dst
}
