package explain

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteText writes r for people: per descriptor the match, then each
// limit with its effective value, key (and a fixed window's field in
// it) and (live) state.
func WriteText(w io.Writer, r *Report) error {
	tw := &textWriter{w: w}
	mode := "offline: counters not read"
	if r.Live {
		mode = "live"
	}
	tw.printf("domain %q at %s (%s)\n", r.Domain, r.At, mode)
	if r.Source != "" {
		tw.printf("rules from %s\n", r.Source)
	}
	for i, d := range r.Descriptors {
		tw.printf("\ndescriptor %d: %s\n", i, entriesText(d.Entries))
		tw.levels(d.Levels)
		tw.quotas(d.Quotas)
		switch {
		case d.Rule == nil:
			tw.printf("  no limit: %s\n", d.NoMatch)
			continue
		case d.Rule.Unlimited:
			tw.printf("  rule %s (%s:%d): unlimited\n", d.Rule.ID, d.Rule.File, d.Rule.Line)
			continue
		}
		tw.printf("  rule %s (%s:%d)%s\n", d.Rule.ID, d.Rule.File, d.Rule.Line, ruleFlags(d.Rule))
		for _, l := range d.Limits {
			tw.limit(l)
		}
	}
	return tw.err
}

// quotas prints a bucket's RLQS assignments, one line per instance.
func (t *textWriter) quotas(qs []QuotaAssignment) {
	for _, q := range qs {
		what := q.Kind
		if q.Kind == "token_bucket" {
			what = fmt.Sprintf("token bucket %d per %ds, max %d (of %d instances)", q.TokensPerFill, q.FillIntervalS, q.MaxTokens, q.Instances)
		}
		t.printf("  rlqs %s: %s, until %s", q.Instance, what, q.Expires)
		if q.Reason != "" {
			t.printf(" (%s)", q.Reason)
		}
		t.printf("\n")
	}
}

type textWriter struct {
	w   io.Writer
	err error
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

func (t *textWriter) levels(levels []Level) {
	for i, lv := range levels {
		t.printf("  level %d %s=%s:", i+1, lv.Entry.Key, lv.Entry.Value)
		if len(lv.Candidates) == 0 {
			t.printf(" no descriptor matches\n")
			continue
		}
		t.printf("\n")
		for _, c := range lv.Candidates {
			mark := "  beaten"
			if c.Chosen {
				mark = "* chosen"
			}
			pattern := c.Key
			if c.Kind != "key" {
				pattern += "=" + c.Value
			}
			t.printf("    %s %-8s %s (%s:%d)\n", mark, c.Kind, pattern, c.File, c.Line)
		}
	}
}

func (t *textWriter) limit(l Limit) {
	name := l.Label
	period := l.Unit
	if l.UnitMultiplier > 1 {
		period = fmt.Sprintf("%d %ss", l.UnitMultiplier, l.Unit)
	}
	t.printf("  limit %s: %s, %d per %s", name, l.Algorithm, l.RequestsPerUnit, period)
	if l.Burst > 0 {
		t.printf(", burst %d", l.Burst)
	}
	if l.SubWindows > 0 {
		t.printf(", %d sub-windows", l.SubWindows)
	}
	t.printf("\n    effective: %d per %s", l.Effective.Limit, period)
	if l.Effective.Burst > 0 {
		t.printf(", burst %d", l.Effective.Burst)
	}
	t.printf(" (source: %s)\n", l.Effective.Source)
	if l.OnLimit == "delay" {
		t.printf("    on limit: delay, queued for at most %s\n", ms(l.MaxDelayMS))
	} else {
		t.printf("    on limit: deny\n")
	}
	if l.Cost == "charge" {
		t.printf("    cost: charge (every hit is counted, past the limit too)\n")
	}
	for _, s := range l.Effective.Sources {
		if s.Ignored {
			t.printf("    ignored: %s (it changed the algorithm or period)\n", s.Name)
		}
	}
	if l.ReplacedBy != "" {
		t.printf("    replaced by rule %s: not applied to this request\n", l.ReplacedBy)
	}
	// A fixed window's counter is a field of its window's hash: the key
	// is the hash, and the field says which counter in it.
	t.printf("    redis key: %s", l.Key)
	if l.Field != "" {
		t.printf(" field %s", l.Field)
	}
	t.printf(" (slot %d", l.Slot)
	if l.HashTag != "" {
		t.printf(", hash tag %s", l.HashTag)
	}
	t.printf(")\n")
	if s := l.State; s != nil {
		if !s.Exists {
			t.printf("    state: no counter yet; remaining %d\n", s.Remaining)
			return
		}
		if s.Overdraft > 0 {
			t.printf("    state: overdrawn by %d, resets in %s, ttl %s\n", s.Overdraft, ms(s.ResetAfterMS), ms(s.TTLMS))
		} else {
			t.printf("    state: remaining %d, resets in %s, ttl %s\n", s.Remaining, ms(s.ResetAfterMS), ms(s.TTLMS))
		}
		if len(s.Raw.SubWindows) > 0 {
			t.printf("    sub-window counts, current first: %s\n", joinCounts(s.Raw.SubWindows))
		}
	}
}

// joinCounts spells counts separated by spaces.
func joinCounts(counts []int64) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = strconv.FormatInt(c, 10)
	}
	return strings.Join(parts, " ")
}

func ms(v float64) string {
	if v < 0 {
		return "none"
	}
	return time.Duration(v * float64(time.Millisecond)).Round(time.Millisecond).String()
}

func ruleFlags(r *RuleRef) string {
	var f []string
	if r.ShadowMode {
		f = append(f, "shadow_mode")
	}
	if r.QuotaMode {
		f = append(f, "quota_mode")
	}
	if len(f) == 0 {
		return ""
	}
	return " [" + strings.Join(f, ", ") + "]"
}

func entriesText(es []Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ", ")
}
