package rls

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TopRecorder keeps the descriptor values each limit sees and denies most
// (pkg/topk's Set). Record is called on the request path, once per limit
// of every decided request, from many goroutines: it must be safe for
// concurrent use, cheap, and must not keep entries (the plan reuses them).
type TopRecorder interface {
	Record(now time.Time, domain, rule, limit string, entries []algo.Entry, denied bool)
}

// recordTop tells Config.Top each limit's decision: denied when the limit
// itself denied the hits (a limit that admitted inside a denied request
// was seen, not denied).
func (s *Service) recordTop(domain string, p *plan) {
	for i := range p.checks {
		s.cfg.Top.Record(p.now, domain, p.meta[i].ruleID, p.meta[i].limitLabel, p.checks[i].Entries, !p.decisions[i].Allowed)
	}
}
