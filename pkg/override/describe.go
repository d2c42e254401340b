package override

import (
	"fmt"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// LimitView is one configured limit as /debug/config shows it: what the
// rules say, what applies now, and why.
type LimitView struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	// Limit is the name an override addresses it by (Target).
	Limit      string `json:"limit"`
	Configured uint32 `json:"configured_requests_per_unit"`
	Effective  uint32 `json:"effective_requests_per_unit"`
	// Source is "config" when the configured value applies, the source of
	// the override in force ("manual", "adaptive"), or "adjusted" when
	// another adjuster (a warm-up ramp) changed it.
	Source   string    `json:"source"`
	Override *Override `json:"override,omitempty"`
}

// Describe lists every limit of snap with its effective value at now;
// effective is the whole adjuster chain (pkg/rls Service.EffectiveLimit),
// so other adjusters show too.
func (t *Table) Describe(snap *rules.Snapshot, now time.Time, effective func(now time.Time, domain string, r *rules.Rule, l *rules.Limit) uint32) []LimitView {
	out := []LimitView{}
	for _, d := range snap.Domains() {
		for _, r := range d.Rules() {
			for i := range r.Limits {
				l := &r.Limits[i]
				v := LimitView{Domain: d.Name, Rule: r.ID, Limit: Target(r, l), Configured: l.RequestsPerUnit,
					Effective: effective(now, d.Name, r, l), Source: "config"}
				if o := t.Lookup(now, d.Name, r, l); o != nil {
					v.Source, v.Override = string(o.Source), o
				} else if v.Effective != v.Configured {
					v.Source = "adjusted"
				}
				out = append(out, v)
			}
		}
	}
	return out
}

// CheckTarget reports whether snap has the limit an override of domain and
// limit would address, so a typo is refused instead of stored to change
// nothing; the error lists the domains loaded, or the domain's limits.
func CheckTarget(snap *rules.Snapshot, domain, limit string) error {
	if !snap.HasDomain(domain) {
		var domains []string
		for _, d := range snap.Domains() {
			domains = append(domains, d.Name)
		}
		return fmt.Errorf("override: no domain %q in the loaded rules (want one of: %s)", domain, strings.Join(domains, ", "))
	}
	var names []string
	for _, d := range snap.Domains() {
		if d.Name != domain {
			continue
		}
		for _, r := range d.Rules() {
			for i := range r.Limits {
				name := Target(r, &r.Limits[i])
				if name == limit {
					return nil
				}
				names = append(names, name)
			}
		}
	}
	return fmt.Errorf("override: domain %q has no limit %q (want one of: %s)", domain, limit, strings.Join(names, ", "))
}
