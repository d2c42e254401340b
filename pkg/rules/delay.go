package rules

import (
	"fmt"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// DefaultMaxDelay is the ceiling on a limit's max_delay when
// Options.MaxDelay is 0 (the server's --max-delay). A request held longer
// than Envoy's rate_limit timeout is answered by Envoy's failure mode
// instead, so the ceiling stays below the timeouts Envoy is given.
const DefaultMaxDelay = time.Second

func (o Options) maxDelay() time.Duration {
	if o.MaxDelay <= 0 {
		return DefaultMaxDelay
	}
	return o.MaxDelay
}

// onLimit reads `on_limit: deny | delay` and `max_delay`, returning the
// limit's MaxDelay: 0 for deny (the default). delay queues a request over
// the limit for at most max_delay (required with it, at most the server's
// ceiling) on token_bucket and gcra only. alg is 0 when it is bad; the mode
// is then not judged against it; lease is the limit's `lease: auto`.
func (p *parser) onLimit(f map[string]*yaml.Node, line int, path string, alg algo.Algorithm, lease bool) (time.Duration, bool) {
	on, hasOn := f["on_limit"]
	dn, hasDelay := f["max_delay"]
	delay := false
	if hasOn {
		s, ok := p.str(on, path+".on_limit")
		if !ok {
			return 0, false
		}
		switch strings.ToLower(s) {
		case "deny":
		case "delay":
			delay = true
		default:
			p.errorf(on.Line, path+".on_limit", "unknown mode %q (want deny|delay)", s)
			return 0, false
		}
	}
	if !delay {
		if hasDelay {
			p.errorf(dn.Line, path+".max_delay", "set without on_limit: delay (want on_limit: delay, or no max_delay)")
			return 0, false
		}
		return 0, true
	}
	ok := true
	if spec, _ := alg.Spec(); alg != 0 && !spec.MayQueue {
		p.errorf(on.Line, path+".on_limit", "delay for algorithm %s: a window cannot reserve a hit for a later time without losing its current count (want delay only with %s)",
			alg, algo.ListNames(algo.Where(algo.Spec.Queueable)))
		ok = false
	}
	if lease {
		p.errorf(on.Line, path+".on_limit", "delay with lease: auto: a replica answering from its lease cannot queue (want one of them)")
		ok = false
	}
	if !hasDelay {
		p.errorf(line, path+".max_delay", "missing with on_limit: delay (want a duration such as 500ms, at most %s)", p.opts.maxDelay())
		return 0, false
	}
	d, dok := p.maxDelayValue(dn, path+".max_delay")
	return d, ok && dok
}

// maxDelayValue reads a max_delay: a duration above 0, at most the
// server's ceiling.
func (p *parser) maxDelayValue(n *yaml.Node, path string) (time.Duration, bool) {
	ceiling := p.opts.maxDelay()
	want := fmt.Sprintf("a duration such as 500ms, above 0 and at most the server's --max-delay %s", ceiling)
	return p.durationIn(n, path, want, time.Microsecond, ceiling)
}

// durationIn reads n as a duration in [lo, hi]; want says what is wanted
// in the error.
func (p *parser) durationIn(n *yaml.Node, path, want string, lo, hi time.Duration) (time.Duration, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errorf(n.Line, path, "%q is not a duration (want %s)", s, want)
		return 0, false
	}
	if d < lo || d > hi {
		p.errorf(n.Line, path, "%s is out of range (want %s)", d, want)
		return 0, false
	}
	return d, true
}
