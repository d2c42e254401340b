// Package explain answers "why was this request limited?". For each
// descriptor of a request it reports the rule Match picks (file:line) and
// the descriptors it beat at each level (exact, wildcard, key alone), each
// limit's algorithm with its configured and effective value (after the
// service's LimitAdjusters: warm-up ramps, runtime overrides), the Redis
// key and hash slot of its counter and, given a store to peek at, the
// counter's state now (remaining, reset, TTL).
//
// It only reads: it never applies a check, so an explanation consumes no
// hit and writes to no store. It must not see gRPC types (the service's
// adjusted limits reach it as rls.Effective), parse flags or listen;
// envoy-rls explain (offline) and the debug listener's /debug/explain
// (live) wire it.
package explain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Entry is one descriptor entry.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Request is what to explain: a domain and its descriptors, as Envoy would
// send them.
type Request struct {
	Domain      string    `json:"domain"`
	Descriptors [][]Entry `json:"descriptors"`
}

// Validate says what is wrong with r, or nil.
func (r Request) Validate() error {
	if r.Domain == "" {
		return errors.New("explain: no domain")
	}
	if len(r.Descriptors) == 0 {
		return errors.New("explain: no descriptor")
	}
	for i, d := range r.Descriptors {
		if len(d) == 0 {
			return fmt.Errorf("explain: descriptors[%d] has no entries", i)
		}
	}
	return nil
}

// Peeker reads counters without changing them (stack.Stack.Peek).
type Peeker interface {
	Peek(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Peeked, error)
}

// Explainer explains requests against rules. The zero value is not usable:
// Rules is required.
type Explainer struct {
	// Rules returns the rules to explain against.
	Rules func() *rules.Snapshot
	// Effective returns a limit as the service would apply it at now; nil
	// means as configured (no adjusters), as offline.
	Effective func(now time.Time, domain string, r *rules.Rule, l *rules.Limit) rls.Effective
	// KeyPrefix is the deployment's Redis key prefix (--redis-key-prefix).
	KeyPrefix string
	// CounterHashes is the deployment's counter-hash count (the one its
	// replicas recorded in Redis: redisalgo.ResolveCounterHashes), which
	// says which hash a fixed window's counter is in.
	CounterHashes int
	// Peeker, when set, makes the explanation live: each counter's state
	// is read from it.
	Peeker Peeker
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Quotas, when set (live), returns the RLQS assignments of the bucket
	// whose descriptor path is entries, one per Envoy instance connected
	// to this replica.
	Quotas func(domain string, entries []algo.Entry) []QuotaAssignment
}

// QuotaAssignment is what an Envoy instance was last assigned over RLQS
// for a bucket (pkg/rlqs; see docs/rlqs.md).
type QuotaAssignment struct {
	Instance string `json:"instance"`
	// Kind is token_bucket, allow_all or deny_all.
	Kind          string  `json:"kind"`
	TokensPerFill uint32  `json:"tokens_per_fill,omitempty"`
	FillIntervalS int64   `json:"fill_interval_s,omitempty"`
	MaxTokens     uint32  `json:"max_tokens,omitempty"`
	Instances     int     `json:"instances,omitempty"`
	DemandPerSec  float64 `json:"demand_per_second"`
	Expires       string  `json:"expires"`
	Reason        string  `json:"reason,omitempty"`
}

// Report is an explanation of one request.
type Report struct {
	Domain string `json:"domain"`
	// Source is where the domain's rules came from: a file, or an xDS
	// resource at its version (rules.Source); empty for an unknown domain.
	Source string `json:"source,omitempty"`
	// Live reports whether counter states were read from a running store.
	Live bool `json:"live"`
	// At is when the limits were evaluated (RFC 3339).
	At          string       `json:"at"`
	Descriptors []Descriptor `json:"descriptors"`
}

// Descriptor explains one request descriptor.
type Descriptor struct {
	Entries []Entry `json:"entries"`
	// Rule is the matched rule; nil when none applies, and NoMatch says
	// why.
	Rule    *RuleRef `json:"rule,omitempty"`
	NoMatch string   `json:"no_match,omitempty"`
	// Levels shows the walk: per entry, the descriptors it matched.
	Levels []Level `json:"levels"`
	Limits []Limit `json:"limits,omitempty"`
	// Quotas are the RLQS assignments of the bucket with this descriptor
	// path, per Envoy instance (live only).
	Quotas []QuotaAssignment `json:"rlqs_assignments,omitempty"`
}

// RuleRef names a rule and where it is.
type RuleRef struct {
	ID         string `json:"id"`
	Path       string `json:"path"`
	File       string `json:"file"`
	Line       int    `json:"line"`
	Unlimited  bool   `json:"unlimited,omitempty"`
	ShadowMode bool   `json:"shadow_mode,omitempty"`
	QuotaMode  bool   `json:"quota_mode,omitempty"`
}

// Level is one entry of the walk and the descriptors it matched, the
// chosen one first.
type Level struct {
	Entry      Entry       `json:"entry"`
	Candidates []Candidate `json:"candidates"`
}

// Candidate is a configured descriptor an entry matched.
type Candidate struct {
	// Kind is exact, wildcard or key.
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	RuleID string `json:"rule_id,omitempty"`
	Chosen bool   `json:"chosen"`
}

// Limit is one limit of the matched rule.
type Limit struct {
	Name           string `json:"name,omitempty"`
	Label          string `json:"label"`
	Algorithm      string `json:"algorithm"`
	Unit           string `json:"unit"`
	UnitMultiplier uint32 `json:"unit_multiplier"`
	PeriodUS       int64  `json:"period_us"`
	// RequestsPerUnit and Burst are as configured.
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Burst           int64  `json:"burst,omitempty"`
	// SubWindows is a sliding_window's sub-window count (1: the
	// two-window estimate).
	SubWindows int64 `json:"sub_windows,omitempty"`
	// OnLimit is what a request over the limit gets: "deny", or "delay"
	// (queued for at most MaxDelayMS).
	OnLimit    string  `json:"on_limit"`
	MaxDelayMS float64 `json:"max_delay_ms,omitempty"`
	// Cost is "request" (a denied request counts nothing) or "charge"
	// (every hit is counted, past the limit too: rules.Limit.Charge).
	Cost string `json:"cost"`
	// Effective is the limit the service applies now.
	Effective Effective `json:"effective"`
	// ReplacedBy names the limit another descriptor's rule replaces this
	// one with (replaces:); the request path then skips it.
	ReplacedBy string `json:"replaced_by,omitempty"`
	// Key is the counter's Redis key (a fixed window's: its window's hash,
	// Field its field there) and Slot its Redis Cluster slot.
	Key   string `json:"key"`
	Field string `json:"field,omitempty"`
	Slot  int    `json:"slot"`
	// HashTag is the entry key whose value co-locates the rule's keys.
	HashTag string `json:"hash_tag,omitempty"`
	// State is the counter now; only live.
	State *State `json:"state,omitempty"`
}

// Effective is the limit after the adjusters.
type Effective struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Limit           int64  `json:"limit"`
	Burst           int64  `json:"burst,omitempty"`
	// Source is "config" when nothing changed the limit, else the
	// adjusters that did, in order.
	Source  string   `json:"source"`
	Sources []Source `json:"sources,omitempty"`
}

// Source is an adjuster's part in the effective limit.
type Source struct {
	Name    string `json:"name"`
	Limit   int64  `json:"limit"`
	Burst   int64  `json:"burst,omitempty"`
	Ignored bool   `json:"ignored,omitempty"`
}

// State is a counter's state as the store holds it now, and what a
// request that consumes nothing would be told.
type State struct {
	Exists bool `json:"exists"`
	// Remaining, ResetAfterMS and RetryAfterMS are the check-only
	// decision (algo.Decision). Remaining is negative when the limit is
	// overdrawn (by charges, or under a lowered limit): Overdraft is then
	// by how much.
	Allowed      bool    `json:"allowed"`
	Remaining    int64   `json:"remaining"`
	Overdraft    int64   `json:"overdraft,omitempty"`
	ResetAfterMS float64 `json:"reset_after_ms"`
	// TTLMS is the key's remaining time to live; -1 without expiry.
	TTLMS float64 `json:"ttl_ms"`
	// Raw is the stored state (algo.State).
	Raw RawState `json:"raw"`
}

// RawState is algo.State for people: a sliding log by its length.
type RawState struct {
	TimeUS     int64 `json:"time_us,omitempty"`
	Frac       int64 `json:"frac,omitempty"`
	Count      int64 `json:"count,omitempty"`
	Prev       int64 `json:"prev,omitempty"`
	LogEntries int   `json:"log_entries,omitempty"`
	// SubWindows are a sliding window's sub-window counts, the current
	// sub-window's first (TimeUS is its start), then each one before it.
	SubWindows []int64 `json:"sub_windows,omitempty"`
}

// Explain explains req. Live (with a Peeker) it reads every counter of
// the request in one Peek; a failed peek fails the explanation.
func (e *Explainer) Explain(ctx context.Context, req Request) (*Report, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	now := time.Now()
	if e.Now != nil {
		now = e.Now()
	}
	snap := e.Rules()
	rep := &Report{Domain: req.Domain, Live: e.Peeker != nil, At: now.UTC().Format(time.RFC3339Nano)}
	if src, ok := snap.Source(req.Domain); ok {
		rep.Source = src.String()
	}
	replaced := map[string]string{}
	var checks []algo.Check
	var where [][2]int // descriptor and limit of checks[i]
	for _, d := range req.Descriptors {
		entries := make([]algo.Entry, len(d))
		for i, en := range d {
			entries[i] = algo.Entry{Key: en.Key, Value: en.Value}
		}
		ex := snap.Explain(req.Domain, entries)
		desc := describe(d, ex)
		if e.Quotas != nil {
			desc.Quotas = e.Quotas(req.Domain, entries)
		}
		rep.Descriptors = append(rep.Descriptors, desc)
		if ex.Rule == nil || ex.Rule.Unlimited {
			continue
		}
		for _, name := range ex.Rule.Replaces {
			replaced[name] = ex.Rule.ID
		}
		di := len(rep.Descriptors) - 1
		keyEntries := ex.Rule.KeyEntries(entries, nil)
		for li := range ex.Rule.Limits {
			l, c := e.limit(now, req.Domain, ex.Rule, &ex.Rule.Limits[li], keyEntries)
			rep.Descriptors[di].Limits = append(rep.Descriptors[di].Limits, l)
			checks = append(checks, c)
			where = append(where, [2]int{di, li})
		}
	}
	for di := range rep.Descriptors {
		for li := range rep.Descriptors[di].Limits {
			l := &rep.Descriptors[di].Limits[li]
			if by, ok := replaced[l.Name]; ok && l.Name != "" {
				l.ReplacedBy = by
			}
		}
	}
	if e.Peeker == nil || len(checks) == 0 {
		return rep, nil
	}
	peeked, err := e.Peeker.Peek(ctx, now, checks)
	if err != nil {
		return nil, fmt.Errorf("explain: read counters: %w", err)
	}
	for i, p := range peeked {
		d := p.Decision(checks[i].Policy)
		ttl := float64(p.TTL) / 1e3
		if p.TTL < 0 {
			ttl = -1
		}
		lim := &rep.Descriptors[where[i][0]].Limits[where[i][1]]
		if p.Key != "" {
			lim.Key, lim.Field = p.Key, p.Field
		}
		lim.State = &State{
			Exists: p.Exists, Allowed: d.Allowed, Remaining: d.Remaining, Overdraft: max(-d.Remaining, 0),
			ResetAfterMS: float64(d.ResetAfter) / 1e3, TTLMS: ttl,
			Raw: RawState{TimeUS: p.State.Time, Frac: p.State.Frac, Count: p.State.Count, Prev: p.State.Prev, LogEntries: len(p.State.Log), SubWindows: p.State.Subs},
		}
	}
	return rep, nil
}

// limit explains one limit and returns the check that names its counter.
func (e *Explainer) limit(now time.Time, domain string, r *rules.Rule, l *rules.Limit, keyEntries []algo.Entry) (Limit, algo.Check) {
	var eff rls.Effective
	if e.Effective != nil {
		eff = e.Effective(now, domain, r, l)
	} else {
		eff = rls.EffectiveLimit(nil, now, domain, r, l)
	}
	c := algo.Check{Domain: domain, Entries: keyEntries, HashTag: r.HashTag, Policy: eff.Policy}
	// A fixed window's hash names the window holding now; a live explain
	// shows the one the peek read, on Redis's clock.
	key, field := redisalgo.CounterAt(e.KeyPrefix, c, now.UnixMicro(), cmp.Or(e.CounterHashes, redisalgo.DefaultCounterHashes))
	out := Limit{
		Name: l.Name, Label: l.Label, Algorithm: l.Policy.Algorithm.String(),
		Unit: l.Unit.String(), UnitMultiplier: l.UnitMultiplier, PeriodUS: l.Policy.Period,
		RequestsPerUnit: l.RequestsPerUnit, Burst: l.Policy.Burst, SubWindows: l.Policy.SubWindows,
		Effective: Effective{RequestsPerUnit: eff.RequestsPerUnit, Limit: eff.Policy.Limit, Burst: eff.Policy.Burst, Source: "config"},
		Key:       key, Field: field, Slot: redisalgo.KeySlot([]byte(key)),
	}
	out.OnLimit, out.MaxDelayMS = onLimit(l)
	out.Cost = "request"
	if l.Charge {
		out.Cost = "charge"
	}
	if t := c.TagIndex(); t >= 0 {
		out.HashTag = keyEntries[t].Key
	}
	for _, s := range eff.Sources {
		out.Effective.Sources = append(out.Effective.Sources, Source{Name: s.Name, Limit: s.Limit, Burst: s.Burst, Ignored: s.Ignored})
		if !s.Ignored {
			if out.Effective.Source == "config" {
				out.Effective.Source = s.Name
			} else {
				out.Effective.Source += ", " + s.Name
			}
		}
	}
	return out, c
}

// describe turns a rules.Explanation into a Descriptor without limits.
func describe(d []Entry, ex rules.Explanation) Descriptor {
	out := Descriptor{Entries: d, NoMatch: ex.Reason, Levels: []Level{}}
	if r := ex.Rule; r != nil {
		out.Rule = &RuleRef{ID: r.ID, Path: r.Path, File: r.File, Line: r.Line, Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode}
	}
	for _, lv := range ex.Levels {
		l := Level{Entry: Entry{Key: lv.Entry.Key, Value: lv.Entry.Value}, Candidates: []Candidate{}}
		for _, c := range lv.Candidates {
			cand := Candidate{Kind: c.Kind, Key: c.Key, Value: c.Value, File: c.File, Line: c.Line, Chosen: c.Chosen}
			if c.Rule != nil {
				cand.RuleID = c.Rule.ID
			}
			l.Candidates = append(l.Candidates, cand)
		}
		out.Levels = append(out.Levels, l)
	}
	return out
}
