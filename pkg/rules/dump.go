package rules

import (
	"fmt"
	"io"
	"strconv"
)

// WriteRLConfig writes the rules in the text form of envoyproxy/ratelimit's
// /rlconfig debug endpoint, one line per limit:
//
//	domain.key_value.key2: unit=MINUTE requests_per_unit=20, shadow_mode: false
//
// so that scripts reading that endpoint keep working. The key is the rule's
// Path (the reference's full key); an unlimited rule reads unit=UNKNOWN
// requests_per_unit=0, as there. Domains come in name order and rules in
// file order, where the reference's order is that of Go map iteration.
// The form has no room for our extensions (unit_multiplier, algorithm,
// burst): /debug/config shows them. The one exception is a warm-up ramp,
// appended as ", warmup: period=10m0s from=0.33 start=…" (start only when
// fixed) after shadow_mode, where a script reading the reference's fields
// still finds them: a limit that will change by itself must say so. A rule
// with several limits has one line for each. A nil *Snapshot writes
// nothing.
func (s *Snapshot) WriteRLConfig(w io.Writer) error {
	for _, d := range s.Domains() {
		for _, r := range d.rules {
			if r.Unlimited {
				if _, err := fmt.Fprintf(w, "%s: unit=UNKNOWN requests_per_unit=0, shadow_mode: %t\n", r.Path, r.ShadowMode); err != nil {
					return fmt.Errorf("rules: write rlconfig: %w", err)
				}
				continue
			}
			for _, l := range r.Limits {
				if _, err := fmt.Fprintf(w, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t%s\n",
					r.Path, l.Unit.EnvoyName(), l.RequestsPerUnit, r.ShadowMode, rlconfigWarmup(l.Warmup)); err != nil {
					return fmt.Errorf("rules: write rlconfig: %w", err)
				}
			}
		}
	}
	return nil
}

// rlconfigWarmup is the /rlconfig suffix of a warm-up ramp, "" for none.
func rlconfigWarmup(w *Warmup) string {
	j := newWarmupJSON(w)
	if j == nil {
		return ""
	}
	s := fmt.Sprintf(", warmup: period=%s from=%s", j.Period, strconv.FormatFloat(j.From, 'g', -1, 64))
	if j.Start != "" {
		s += " start=" + j.Start
	}
	return s
}
