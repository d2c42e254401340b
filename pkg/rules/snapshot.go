package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// node is one descriptor level of the compiled match tree: the descriptors
// nested under one parent, indexed three ways so that a lookup is a map
// probe or a short scan and never allocates.
type node struct {
	exact map[algo.Entry]*node // key=value, wildcards included by literal value
	wild  []wildcard           // values with a "*" anywhere, in file order
	keys  map[string]*node     // key alone
	rule  *Rule
	line  int
	file  string // where the descriptor is, for Explain
}

type wildcard struct {
	key  string
	glob glob
	next *node
}

// glob is a descriptor value pattern in which every "*" stands for any run
// of bytes, the empty run included, wherever it appears: "foo*" is a prefix,
// "/api*v1" a prefix and a suffix, "svc*ep*rpc" also needs "ep" between
// them. That is envoyproxy/ratelimit's wildcard since it accepted "*" in
// any position; before, a "*" that did not end the value was a literal.
type glob struct {
	prefix, suffix string
	middle         []string // in order, each after the previous one
}

func newGlob(pattern string) glob {
	parts := strings.Split(pattern, "*")
	return glob{prefix: parts[0], suffix: parts[len(parts)-1], middle: parts[1 : len(parts)-1]}
}

// match reports whether v matches the pattern. Taking the leftmost
// occurrence of each middle segment is enough: a later one would only leave
// less room for the segments after it. It does not allocate.
func (g *glob) match(v string) bool {
	if len(v) < len(g.prefix)+len(g.suffix) || !strings.HasPrefix(v, g.prefix) || !strings.HasSuffix(v, g.suffix) {
		return false
	}
	rest := v[len(g.prefix) : len(v)-len(g.suffix)]
	for _, m := range g.middle {
		i := strings.Index(rest, m)
		if i < 0 {
			return false
		}
		rest = rest[i+len(m):]
	}
	return true
}

// child picks the descriptor that entry e selects at this level: exact
// key=value first, then the first wildcard in file order, then the key alone.
func (n *node) child(e algo.Entry) *node {
	if c := n.exact[e]; c != nil {
		return c
	}
	for i := range n.wild {
		w := &n.wild[i]
		if w.key == e.Key && w.glob.match(e.Value) {
			return w.next
		}
	}
	return n.keys[e.Key]
}

func (n *node) hasChildren() bool { return len(n.exact) > 0 || len(n.keys) > 0 }

// Snapshot is an immutable set of domains. It is safe for concurrent use;
// a nil *Snapshot holds no domains.
type Snapshot struct {
	domains map[string]*Domain
	names   []string // sorted
	rules   int
}

// NewSnapshot combines parsed domains into a snapshot. Each domain may
// appear in only one file; every duplicate is reported.
func NewSnapshot(domains ...*Domain) (*Snapshot, error) {
	s := &Snapshot{domains: make(map[string]*Domain, len(domains))}
	var errs []error
	for _, d := range domains {
		if d == nil {
			continue
		}
		if first, dup := s.domains[d.Name]; dup {
			errs = append(errs, &Error{File: d.File, Line: d.Line, Path: "domain",
				Msg: fmt.Sprintf("duplicate domain %q (first in %s:%d; want each domain in one file, or --merge-domain-config)", d.Name, first.File, first.Line)})
			continue
		}
		s.domains[d.Name] = d
		s.names = append(s.names, d.Name)
		s.rules += len(d.rules)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Strings(s.names)
	return s, nil
}

// Match returns the rule for a request descriptor's entries in domain, or
// nil when none applies. It walks the entries level by level as
// envoyproxy/ratelimit does: the rule is the one at the last entry, and a
// descriptor deeper than the configured tree has none. Match does not
// allocate.
func (s *Snapshot) Match(domain string, entries []algo.Entry) *Rule {
	if s == nil || len(entries) == 0 {
		return nil
	}
	d := s.domains[domain]
	if d == nil {
		return nil
	}
	n := &d.root
	last := len(entries) - 1
	for i := range entries {
		next := n.child(entries[i])
		if next == nil {
			return nil
		}
		if i == last {
			return next.rule
		}
		if !next.hasChildren() {
			return nil
		}
		n = next
	}
	return nil
}

// HasDomain reports whether domain is configured.
func (s *Snapshot) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// Domains returns the configured domains sorted by name.
func (s *Snapshot) Domains() []*Domain {
	if s == nil {
		return nil
	}
	out := make([]*Domain, len(s.names))
	for i, n := range s.names {
		out[i] = s.domains[n]
	}
	return out
}

// Source returns where domain's rules came from, and whether domain is
// configured.
func (s *Snapshot) Source(domain string) (Source, bool) {
	if s == nil {
		return Source{}, false
	}
	d, ok := s.domains[domain]
	if !ok {
		return Source{}, false
	}
	return d.Source, true
}

// NumRules returns the number of rules in all domains.
func (s *Snapshot) NumRules() int {
	if s == nil {
		return 0
	}
	return s.rules
}

// MarshalJSON dumps the loaded rules as configured; /debug/config shows
// Dump's form, which adds each limit's effective value.
func (s *Snapshot) MarshalJSON() ([]byte, error) { return json.Marshal(s.Dump(nil)) }

// EffectiveLimit returns the requests_per_unit limit l of rule r has now,
// after warm-up ramps and overrides (rls.Service.CurrentLimit).
type EffectiveLimit func(domain string, r *Rule, l *Limit) uint32

// warmupJSON is a warmup block as the rule file writes it.
type warmupJSON struct {
	Period string  `json:"period"`
	From   float64 `json:"from"`
	Start  string  `json:"start,omitempty"`
}

func newWarmupJSON(w *Warmup) *warmupJSON {
	if w == nil {
		return nil
	}
	j := &warmupJSON{Period: w.Period.String(), From: w.From}
	if !w.Start.IsZero() {
		j.Start = w.Start.Format(time.RFC3339)
	}
	return j
}

// View is the loaded rules as /debug/config shows them, a typed value
// that callers may embed in a larger page.
type View struct {
	Domains []DomainView `json:"domains"`
}

// DomainView is one domain of a View.
type DomainView struct {
	Domain string     `json:"domain"`
	File   string     `json:"file"`
	Source Source     `json:"source"`
	Rules  []RuleView `json:"rules"`
}

// RuleView is one rule of a DomainView.
type RuleView struct {
	ID             string         `json:"id"`
	Path           string         `json:"path"`
	Line           int            `json:"line"`
	Limits         []LimitView    `json:"limits,omitempty"`
	Unlimited      bool           `json:"unlimited,omitempty"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	HashTag        int            `json:"hash_tag"`
	Replaces       []string       `json:"replaces,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
}

// LimitView is one limit of a RuleView.
type LimitView struct {
	Name string `json:"name,omitempty"`
	// Label tells the limits of one rule apart in metrics (Limit.Label).
	Label           string `json:"label"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Algorithm       string `json:"algorithm"`
	PeriodUS        int64  `json:"period_us"`
	Burst           int64  `json:"burst,omitempty"`
	SubWindows      int64  `json:"sub_windows,omitempty"`
	Lease           bool   `json:"lease,omitempty"`
	// Effective is set by Dump with an EffectiveLimit: the
	// requests_per_unit in force now.
	Effective *uint32     `json:"effective_requests_per_unit,omitempty"`
	Warmup    *warmupJSON `json:"warmup,omitempty"`
}

// Dump returns the rules in MarshalJSON's form, with each limit's
// effective_requests_per_unit from eff when eff is not nil, for
// /debug/config: while a ramp or an override runs, that is the limit
// requests get.
func (s *Snapshot) Dump(eff EffectiveLimit) View {
	out := View{Domains: []DomainView{}}
	for _, d := range s.Domains() {
		dj := DomainView{Domain: d.Name, File: d.File, Source: d.Source, Rules: []RuleView{}}
		for _, r := range d.rules {
			rj := RuleView{
				ID: r.ID, Path: r.Path, Line: r.Line, Unlimited: r.Unlimited,
				ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, ShareThreshold: r.ShareThreshold,
				DetailedMetric: r.DetailedMetric, ValueToMetric: r.ValueToMetric,
				HashTag: r.HashTag, Replaces: r.Replaces, Metadata: r.Metadata,
			}
			for i := range r.Limits {
				l := &r.Limits[i]
				lj := LimitView{
					Name: l.Name, Label: l.Label, Unit: l.Unit.EnvoyName(), UnitMultiplier: l.UnitMultiplier, RequestsPerUnit: l.RequestsPerUnit,
					Algorithm: l.Policy.Algorithm.String(), PeriodUS: l.Policy.Period, Burst: l.Policy.Burst, SubWindows: l.Policy.SubWindows,
					Lease: l.Lease, Warmup: newWarmupJSON(l.Warmup),
				}
				if eff != nil {
					v := eff(d.Name, r, l)
					lj.Effective = &v
				}
				rj.Limits = append(rj.Limits, lj)
			}
			dj.Rules = append(dj.Rules, rj)
		}
		out.Domains = append(out.Domains, dj)
	}
	return out
}
