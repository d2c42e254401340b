package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Warmup is a limit's warm-up ramp (`warmup:`): the limit grows smoothly
// from From × the limit to the limit over Period, as a flash sale pre-heats
// its buckets and Sentinel's warm-up brings a cold system up from a third
// of its limit. The ramp starts at Start; with no Start it starts when the
// limit first appears or changes, which pkg/warmup anchors so that every
// replica ramps alike.
type Warmup struct {
	// Period is how long the ramp lasts, in (0, MaxWarmupPeriod].
	Period time.Duration
	// From is the fraction of the limit the ramp starts at, in (0, 1].
	From float64
	// Start is the ramp's fixed start (the sale's opening), or the zero
	// time when the ramp starts on first sight of the limit.
	Start time.Time
	// Anchor names the ramp's start when there is no Start: a digest of
	// the limit's place (domain, rule path, label), its definition and the
	// ramp, so that replicas loading one definition share one anchor and a
	// changed limit gets a new one (its ramp starts again). It is hex.
	Anchor string
}

// MaxWarmupPeriod bounds a ramp: a longer one is a typo (10h for 10m)
// more often than a plan, and its anchor would have to be kept for as long.
const MaxWarmupPeriod = 7 * 24 * time.Hour

// DefaultWarmupFrom is the starting fraction when a warmup block names
// none: Sentinel's cold factor of 3.
const DefaultWarmupFrom = 1.0 / 3

var warmupFields = []string{"period", "from", "start"}

// warmup reads a rate limit's optional warmup block; nil when absent. Every
// field is read, so that each bad one is reported.
func (p *parser) warmup(f map[string]*yaml.Node, path string) (*Warmup, bool) {
	wn, has := f["warmup"]
	if !has {
		return nil, true
	}
	path += ".warmup"
	m := p.mapping(wn, path, "a mapping with period, and optionally from and start")
	if m == nil {
		return nil, false
	}
	wf := p.fields(m, path, warmupFields)
	w := &Warmup{From: DefaultWarmupFrom}
	ok := true
	if pn, has := wf["period"]; has {
		w.Period, ok = p.warmupPeriod(pn, path+".period")
	} else {
		p.errorf(m.Line, path+".period", "missing (want a duration such as 10m, at most %s)", MaxWarmupPeriod)
		ok = false
	}
	if fn, has := wf["from"]; has {
		var fok bool
		w.From, fok = p.warmupFrom(fn, path+".from")
		ok = ok && fok
	}
	if sn, has := wf["start"]; has {
		var sok bool
		w.Start, sok = p.warmupStart(sn, path+".start")
		ok = ok && sok
	}
	return w, ok
}

func (p *parser) warmupPeriod(n *yaml.Node, path string) (time.Duration, bool) {
	want := fmt.Sprintf("a duration such as 10m, above 0 and at most %s", MaxWarmupPeriod)
	return p.durationIn(n, path, want, 1, MaxWarmupPeriod)
}

// warmupFrom reads the starting fraction. A fraction of 0 would start the
// ramp by denying everything, which is an outage rather than a warm-up.
func (p *parser) warmupFrom(n *yaml.Node, path string) (float64, bool) {
	const want = "a fraction of the limit above 0 and at most 1, such as 0.33"
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") {
		p.errorf(line, path, "got %s (want %s)", describe(n), want)
		return 0, false
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !(v > 0 && v <= 1) {
		p.errorf(line, path, "%s is out of range (want %s)", n.Value, want)
		return 0, false
	}
	return v, true
}

func (p *parser) warmupStart(n *yaml.Node, path string) (time.Time, bool) {
	const want = `an RFC 3339 time such as "2026-12-24T10:00:00Z"`
	s, ok := p.str(n, path)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil || s == "" {
		p.errorf(n.Line, path, "%q is not a time (want %s)", s, want)
		return time.Time{}, false
	}
	return t, true
}

// anchorID is Warmup.Anchor for limit l of rule r.
func anchorID(r *Rule, l *Limit) string {
	w := l.Warmup
	h := sha256.New()
	// %q keeps the client-visible names apart however they are spelled.
	fmt.Fprintf(h, "%q %q %q %s %d %d %d %d %d %d %s %g %d",
		r.Domain, r.Path, l.Label, l.Policy.Algorithm, l.Policy.Limit, l.Policy.Period, l.Policy.Burst,
		l.Unit, l.UnitMultiplier, l.RequestsPerUnit, w.Period, w.From, w.Start.UnixMicro())
	return hex.EncodeToString(h.Sum(nil)[:16])
}
