package rules

import (
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Kinds of descriptor a request entry can select at one level, in the
// order Match prefers them.
const (
	KindExact    = "exact"    // key and value
	KindWildcard = "wildcard" // key and a value with "*"
	KindKey      = "key"      // key alone, any value
)

// Candidate is one configured descriptor that a request entry matched at
// one level of the tree: the one Match chose, or one it beat.
type Candidate struct {
	// Kind is KindExact, KindWildcard or KindKey.
	Kind string
	// Key and Value are the descriptor's own; Value is "" for KindKey and
	// the pattern for KindWildcard.
	Key, Value string
	// File and Line locate the descriptor.
	File string
	Line int
	// Rule is the descriptor's rule, nil when it only nests others.
	Rule *Rule
	// Chosen marks the candidate Match took.
	Chosen bool
}

// Level is one request entry and the descriptors it matched.
type Level struct {
	Entry algo.Entry
	// Candidates are in Match's order of preference: exact, then the
	// matching wildcards in file order, then the key alone. Empty when no
	// descriptor at this level matched the entry.
	Candidates []Candidate
}

// Explanation says how Match treated one request descriptor.
type Explanation struct {
	// Rule is what Match returns for the descriptor, nil for none.
	Rule *Rule
	// Levels has one element per entry walked; the walk stops at the
	// first entry that matched nothing, or after a descriptor with nothing
	// nested under it.
	Levels []Level
	// Reason says why Rule is nil, "" when it is not.
	Reason string
}

// Explain walks entries as Match does and records, level by level, every
// descriptor the entry matched and which one won. It allocates and is for
// tools (envoy-rls explain and the live debug endpoint), never the request
// path: its result is Match's, which a test holds it to.
func (s *Snapshot) Explain(domain string, entries []algo.Entry) Explanation {
	var ex Explanation
	switch {
	case len(entries) == 0:
		ex.Reason = "the descriptor has no entries"
		return ex
	case !s.HasDomain(domain):
		ex.Reason = "domain " + quote(domain) + " is not configured"
		return ex
	}
	n := &s.domains[domain].root
	last := len(entries) - 1
	for i, e := range entries {
		lv := Level{Entry: e, Candidates: n.candidates(e)}
		ex.Levels = append(ex.Levels, lv)
		next := n.child(e)
		switch {
		case next == nil:
			ex.Reason = "no descriptor matches entry " + quote(e.Key) + "=" + quote(e.Value) + " at this level"
			return ex
		case i == last:
			ex.Rule = next.rule
			if ex.Rule == nil {
				ex.Reason = "the matched descriptor has no rate_limit of its own (only nested descriptors)"
			}
			return ex
		case !next.hasChildren():
			ex.Reason = "the request has more entries than the configured tree is deep; the limit is the one at the request's last entry, so none applies"
			return ex
		}
		n = next
	}
	return ex
}

// candidates lists the descriptors of n that e matches, in child's order
// of preference, the first marked Chosen.
func (n *node) candidates(e algo.Entry) []Candidate {
	var out []Candidate
	add := func(kind, value string, c *node) {
		out = append(out, Candidate{Kind: kind, Key: e.Key, Value: value, File: c.file, Line: c.line, Rule: c.rule, Chosen: len(out) == 0})
	}
	if c := n.exact[e]; c != nil {
		add(KindExact, e.Value, c)
	}
	for i := range n.wild {
		w := &n.wild[i]
		if w.key == e.Key && w.glob.match(e.Value) {
			add(KindWildcard, w.glob.pattern(), w.next)
		}
	}
	if c := n.keys[e.Key]; c != nil {
		add(KindKey, "", c)
	}
	return out
}

// pattern is the value the glob was made from.
func (g *glob) pattern() string {
	parts := append(append([]string{g.prefix}, g.middle...), g.suffix)
	return strings.Join(parts, "*")
}

func quote(s string) string { return strconv.Quote(s) }
