package rules

import (
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Options configures parsing, loading and watching. The zero value is usable.
type Options struct {
	// DefaultAlgorithm applies to limits that name no algorithm; zero means
	// algo.SlidingWindow.
	DefaultAlgorithm algo.Algorithm
	// SlidingLogCap bounds requests_per_unit of sliding_log limits (the log
	// keeps one entry per admitted hit); zero means
	// algo.DefaultSlidingLogCap. It must pass algo.ValidateSlidingLogCap
	// (every limit is rejected otherwise); check the flag that sets it.
	SlidingLogCap int64
	// MaxDelay is the longest max_delay a limit may set (--max-delay); zero
	// means DefaultMaxDelay.
	MaxDelay time.Duration
	// DefaultCharge makes `cost: charge` the default of limits that name
	// no cost (--count-denied-hits, and drop-in mode as envoyproxy/
	// ratelimit counts by default); a limit with lease: auto or on_limit:
	// delay stays `cost: request` unless it says otherwise, since neither
	// can count past the limit.
	DefaultCharge bool
	// MergeDomains lets several files of a directory define one domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their top-level
	// descriptors are joined, in file name order. Without it a domain
	// defined twice is refused.
	MergeDomains bool
	// Files says which files of a directory are rule files; the zero
	// value is envoy-rls's own choice (see FileLayout).
	Files FileLayout
	// ZeroMissingRequestsPerUnit reads a rate limit without
	// requests_per_unit as 0 (every request denied), as envoyproxy/ratelimit
	// reads it, and reports it through Warn, instead of refusing the file.
	ZeroMissingRequestsPerUnit bool
	// Warn receives each problem that does not stop a load (see
	// ZeroMissingRequestsPerUnit and FileLayout), formatted as errors are;
	// nil logs it at warn level on Logger.
	Warn func(*Error)

	// Logger receives reload results; it is named "rules". Nil discards.
	Logger *zap.Logger
	// OnReload, when set, is called after every reload attempt of a Loader
	// with its result (nil on success). It runs on the reloading goroutine
	// while the reload lock is held: it must not block for long or call
	// Reload.
	OnReload func(err error)
	// Debounce is how long a Loader waits for file events to stop before it
	// reloads; zero means 100ms.
	Debounce time.Duration
	// PollInterval makes a running Loader also re-read the directory
	// periodically, for file systems whose change events go missing; zero
	// means one minute, a negative value disables polling.
	PollInterval time.Duration
}

func (o Options) defaultAlgorithm() algo.Algorithm {
	if o.DefaultAlgorithm == 0 {
		return algo.SlidingWindow
	}
	return o.DefaultAlgorithm
}

func (o Options) slidingLogCap() int64 {
	if o.SlidingLogCap <= 0 {
		return algo.DefaultSlidingLogCap
	}
	return o.SlidingLogCap
}

// warn reports a problem that does not stop the load.
func (o Options) warn(e *Error) {
	if o.Warn != nil {
		o.Warn(e)
		return
	}
	o.logger().Warn("rule file accepted with a warning", zap.String("file", e.File), zap.Int("line", e.Line), zap.String("warning", e.Error()))
}

func (o Options) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger.Named("rules")
}

func (o Options) debounce() time.Duration {
	if o.Debounce <= 0 {
		return 100 * time.Millisecond
	}
	return o.Debounce
}

func (o Options) pollInterval() time.Duration {
	switch {
	case o.PollInterval < 0:
		return 0
	case o.PollInterval == 0:
		return time.Minute
	}
	return o.PollInterval
}

// Rule is what one configured descriptor with a rate_limit (or rate_limits)
// says. Rules are immutable and shared by every request that matches them.
type Rule struct {
	// ID names the rule in metrics and logs: the rate_limit's name when it
	// has one, else its path in the tree ("domain.key_value.key2"). It comes
	// from configuration only, so its cardinality is bounded.
	ID string
	// Path is the rule's position in the tree, "domain.key_value.key2", as
	// envoyproxy/ratelimit names its stats.
	Path string
	// Domain is the rule's domain.
	Domain string
	// File and Line locate the descriptor in its configuration file.
	File string
	Line int

	// Limits are the limits to apply, all of which must admit a request.
	// It is empty when Unlimited.
	Limits []Limit
	// Unlimited rules admit everything without touching a backend.
	Unlimited bool
	// ShadowMode rules are evaluated and counted but never deny.
	ShadowMode bool
	// QuotaMode rules report exhaustion instead of denying, as
	// envoyproxy/ratelimit's quota_mode defines it.
	QuotaMode bool
	// ShareThreshold reports whether some wildcard on the rule's path has
	// share_threshold set, so that all values it matches share one counter
	// (KeyEntries applies it).
	ShareThreshold bool
	// DetailedMetric and ValueToMetric carry envoyproxy/ratelimit's metric
	// options: detailed_metric of this descriptor, and whether any descriptor
	// on its path sets value_to_metric.
	DetailedMetric bool
	ValueToMetric  bool
	// HashTag is the index of the request entry whose value co-locates this
	// rule's counters on Redis Cluster (hash_tag), or -1 for none.
	HashTag int
	// Replaces lists the limit names that this rule's limits replace when
	// both match one request.
	Replaces []string
	// Metadata is the descriptor's free-form metadata (string keys; values
	// are string, int64, float64, bool, nil, []any or map[string]any).
	Metadata map[string]any

	// shared lists the path levels whose wildcard has share_threshold, with
	// the pattern that stands in for the request's value.
	shared []sharedLevel
	// depth is the number of entries of the descriptors that match the rule.
	depth int
}

type sharedLevel struct {
	level   int
	pattern string
}

// KeyEntries appends to dst the entries that identify this rule's counters
// for the request entries req (the entries Match was given) and returns the
// extended slice. They are req itself, except that a value matched by a
// wildcard with share_threshold is replaced by the wildcard pattern, so that
// every value it matches counts against one shared counter.
func (r *Rule) KeyEntries(req []algo.Entry, dst []algo.Entry) []algo.Entry {
	start := len(dst)
	dst = append(dst, req...)
	for _, s := range r.shared {
		if s.level < len(req) {
			dst[start+s.level].Value = s.pattern
		}
	}
	return dst
}

// Limit is one limit of a rule.
type Limit struct {
	// Name is the rate_limit's name ("" when unnamed); replaces refers to it
	// and responses report it in current_limit.
	Name string
	// Label tells the limit apart from the other limits of its rule in
	// metrics: its name, else its place in the descriptor ("rate_limit",
	// "rate_limits[1]"). Like the rule ID it comes from configuration only.
	Label string
	// Unit is the unit of the period; responses report it.
	Unit algo.Unit
	// UnitMultiplier is the number of units in one period, at least 1.
	UnitMultiplier uint32
	// RequestsPerUnit is the configured limit per period.
	RequestsPerUnit uint32
	// Policy is the limit resolved for the algorithms: the algorithm (the
	// server default when the rule names none), limit, period in µs and
	// burst.
	Policy algo.Policy
	// Lease is `lease: auto`: replicas may serve this limit's hot counters
	// from leases (pkg/lease). Off by default.
	Lease bool
	// Warmup is the limit's warm-up ramp, nil for none. Only a
	// LimitAdjuster (pkg/warmup) applies it: Policy is the ramp's target.
	Warmup *Warmup
	// MaxDelay is `on_limit: delay` with its max_delay: a request over the
	// limit is queued for at most this long instead of denied
	// (algo.Check.MaxDelay). 0, `on_limit: deny`, the default, denies.
	MaxDelay time.Duration
	// Charge is `cost: charge`: every hit is counted, even past the limit
	// (algo.Check.Charge), as a budget charged when a response is done
	// needs; `cost: request`, the default unless Options.DefaultCharge,
	// counts a request only when it is admitted. docs/rules.md, "Costs
	// and charges".
	Charge bool
}
