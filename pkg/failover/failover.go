// Package failover wraps a rate-limit backend (Redis, in production) with a
// per-call timeout, a circuit breaker and a failure policy, so that a dead or
// hung Redis costs each request at most the timeout while the breaker is
// closed and nothing at all once it is open. What a request gets while the
// backend fails is the Mode: an error (the service answers UNAVAILABLE and
// Envoy's failure_mode_deny decides), every request allowed, every request
// denied, or the decision of a local fallback store with each limit divided
// among the replicas.
//
// The breaker is kept per shard when the primary has shards (the masters of
// a Redis Cluster; Options.Routed), so that one failed shard answers its
// own keys' requests with the Mode and leaves every other shard's alone.
// Such a primary asks the breakers itself, through algo's shard gate, once
// it has routed a request and before it sends it; a request it answers
// without its shards (from a lease, from the deny cache) asks none.
//
// The circuit breaker is github.com/sony/gobreaker/v2. failover must not
// import any backend (pkg/memstore, pkg/redisalgo), pkg/rls or anything that
// knows about gRPC: the primary and the fallback are passed in as Limiters.
package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Limiter is what failover consumes twice (the primary and the local
// fallback): the backend layer contract, algo.Applier.
type Limiter = algo.Applier

// Mode says what Apply answers when the primary fails or the breaker is
// open. The zero value is ModeError.
type Mode uint8

// The failure modes of docs/architecture.md#failure-model (flag
// --redis-failure-mode).
const (
	// ModeError returns the error; pkg/rls answers UNAVAILABLE and Envoy's
	// failure_mode_deny decides.
	ModeError Mode = iota
	// ModeAllow admits every request (fail open) and counts it.
	ModeAllow
	// ModeDeny denies every consuming check (fail closed) and counts it.
	ModeDeny
	// ModeLocal decides on Options.Local with every limit divided by
	// Options.ExpectedReplicas.
	ModeLocal
)

var modeNames = [...]string{ModeError: "error", ModeAllow: "allow", ModeDeny: "deny", ModeLocal: "local"}

// String returns the flag value of m, e.g. "local".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode returns the Mode named s (error, allow, deny or local).
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("failover: unknown failure mode %q (want error|allow|deny|local)", s)
}

// State is the circuit breaker's state.
type State uint8

// Breaker states. Closed sends every call to the primary; Open sends none
// until the cool-down has passed; HalfOpen lets Breaker.Probes calls through
// to find out whether the primary is back.
const (
	StateClosed State = iota
	StateHalfOpen
	StateOpen
)

var stateNames = [...]string{StateClosed: "closed", StateHalfOpen: "half_open", StateOpen: "open"}

// String returns the metric label of s: closed, half_open or open.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ErrOpen is returned (wrapped, with the last primary error) in ModeError
// while the breaker is open or its half-open probes are all in flight; the
// primary was not called.
var ErrOpen = errors.New("failover: circuit breaker open")

// errCallerGone marks, for the breaker, a primary error caused by the
// caller cancelling: it says nothing about the primary's health.
var errCallerGone = errors.New("failover: caller canceled")

// maxCount bounds the breaker's counts, which gobreaker keeps as uint32.
const maxCount = 1 << 20

// Defaults for zero BreakerOptions fields.
const (
	DefaultFailures    = 5
	DefaultCooldown    = time.Second
	DefaultProbes      = 1
	DefaultMinRequests = 20
	DefaultWindow      = 10 * time.Second
)

// BreakerOptions configure the circuit breaker. The zero value opens after
// DefaultFailures consecutive failures and probes once per DefaultCooldown.
type BreakerOptions struct {
	// Failures is the number of consecutive failed calls that opens the
	// breaker; 0 means DefaultFailures.
	Failures int
	// FailureRatio, when positive, also opens the breaker once at least
	// MinRequests calls in the last Window failed in this proportion
	// (0 < ratio ≤ 1). It catches a Redis that fails intermittently, which
	// never produces Failures failures in a row.
	FailureRatio float64
	// MinRequests is the fewest calls in Window the ratio is judged on;
	// 0 means DefaultMinRequests.
	MinRequests int
	// Window is the rolling window of the ratio; 0 means DefaultWindow.
	Window time.Duration
	// Cooldown is how long the breaker stays open before it lets probes
	// through; 0 means DefaultCooldown.
	Cooldown time.Duration
	// Probes is how many calls the half-open breaker lets through; that
	// many successes in a row close it, one failure opens it again.
	// 0 means DefaultProbes.
	Probes int
}

// Options configure a Backend. The zero value returns errors when the
// primary fails (ModeError), adds no deadline of its own and uses the
// default breaker.
type Options struct {
	// Ping reports whether the primary is reachable, for Backend.Ping
	// (readiness); nil means the primary is always reachable.
	Ping func(ctx context.Context) error
	// Mode is what Apply answers when the primary fails.
	Mode Mode
	// Local is the fallback store of ModeLocal (the caller passes an
	// in-process store); it must be set for ModeLocal and is unused otherwise.
	Local Limiter
	// ExpectedReplicas is the number of service replicas that share the
	// primary. ModeLocal divides each check's Limit and Burst by it, rounding
	// up; 0 means 1.
	ExpectedReplicas int
	// Timeout bounds each primary call (it becomes the deadline of the
	// context the primary sees, unless the caller's is earlier); 0 means the
	// caller's context alone.
	Timeout time.Duration
	// Breaker configures the circuit breaker of each shard.
	Breaker BreakerOptions
	// Routed says that the primary routes each request to its shards
	// itself and asks their breakers right before it sends anything,
	// through the algo.ShardGate that Apply puts in the primary's context
	// (pkg/redisalgo does, numbering a cluster's masters from 1 and
	// anything else 0). Each shard, a number in 0..MaxShards-1, has a
	// breaker of its own; a request is sent only when the breakers of all
	// its shards let it, and a primary error that names the shards that
	// failed (a FailedShards() []int method anywhere in its chain) counts
	// against those alone. A request the primary answers without asking
	// the gate (a lease or the deny cache answered it) is answered whatever
	// the breakers' states, and counts towards none. False puts every
	// request in shard 0, asked before the primary is called: one breaker
	// for the whole primary.
	Routed bool
	// ShardName, when set, names a shard in the logs (a node's address).
	ShardName func(int) string
	// Logger receives breaker transitions (Warn when it opens, Info when it
	// closes) and, at Debug, every failed call; nil means none.
	Logger *zap.Logger
	// Registerer receives the metrics; nil means they are not exported.
	Registerer prometheus.Registerer
	// Now is the clock for the deny mode's Retry-After and for telling idle
	// shards (see shard.go); nil means time.Now. The breakers themselves
	// run on the wall clock.
	Now func() time.Time
}

// Validate reports every option that New cannot use, naming its field.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("failover: "+format, args...))
	}
	if int(o.Mode) >= len(modeNames) {
		bad("unknown mode %d", o.Mode)
	}
	if o.Mode == ModeLocal && o.Local == nil {
		bad("mode local needs a Local store")
	}
	if o.ExpectedReplicas < 0 {
		bad("ExpectedReplicas %d (want ≥ 1, or 0 for 1)", o.ExpectedReplicas)
	}
	if o.Timeout < 0 {
		bad("Timeout %v (want ≥ 0)", o.Timeout)
	}
	br := o.Breaker
	if br.Failures < 0 || br.Failures > maxCount {
		bad("Breaker.Failures %d (want 1..%d, or 0 for %d)", br.Failures, maxCount, DefaultFailures)
	}
	if br.FailureRatio < 0 || br.FailureRatio > 1 {
		bad("Breaker.FailureRatio %v (want 0..1; 0 turns it off)", br.FailureRatio)
	}
	if br.MinRequests < 0 || br.MinRequests > maxCount {
		bad("Breaker.MinRequests %d (want 1..%d, or 0 for %d)", br.MinRequests, maxCount, DefaultMinRequests)
	}
	if br.Window < 0 {
		bad("Breaker.Window %v (want > 0, or 0 for %v)", br.Window, DefaultWindow)
	}
	if br.Cooldown < 0 {
		bad("Breaker.Cooldown %v (want > 0, or 0 for %v)", br.Cooldown, DefaultCooldown)
	}
	if br.Probes < 0 || br.Probes > maxCount {
		bad("Breaker.Probes %d (want 1..%d, or 0 for %d)", br.Probes, maxCount, DefaultProbes)
	}
	return errors.Join(errs...)
}

// Backend is a Limiter that calls its primary through circuit breakers (one
// per shard) and answers with its Mode when the primary fails or a breaker
// is open. It is safe for concurrent use and starts no goroutines.
type Backend struct {
	primary  Limiter
	ping     func(ctx context.Context) error
	local    Limiter
	mode     Mode
	replicas int64
	timeout  time.Duration
	cooldown time.Duration
	now      func() time.Time
	log      *zap.Logger

	// routed is Options.Routed: the primary asks the shards' breakers
	// through the gate.
	routed    bool
	shardName func(int) string
	// gates pools the per-request gates (gate).
	gates sync.Pool
	// settings is every shard breaker's configuration but OnStateChange.
	settings gobreaker.Settings
	shards   shardSet

	// lastErr is the last error that counted as a primary failure, in any
	// shard.
	lastErr atomic.Pointer[error]

	errors      *prometheus.CounterVec
	failures    *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

// New returns a Backend around primary, or the reasons opts.Validate
// gives.
func New(primary Limiter, opts Options) (*Backend, error) {
	if primary == nil {
		return nil, errors.New("failover: New: nil primary")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	b := &Backend{
		primary:   primary,
		ping:      opts.Ping,
		local:     opts.Local,
		mode:      opts.Mode,
		replicas:  int64(max(opts.ExpectedReplicas, 1)),
		timeout:   opts.Timeout,
		cooldown:  cmp.Or(opts.Breaker.Cooldown, DefaultCooldown),
		now:       opts.Now,
		log:       opts.Logger,
		routed:    opts.Routed,
		shardName: opts.ShardName,
	}
	b.gates.New = func() any { return &gate{b: b} }
	if b.now == nil {
		b.now = time.Now
	}
	if b.log == nil {
		b.log = zap.NewNop()
	}
	b.log = b.log.Named("failover")

	b.settings = breakerSettings(opts.Breaker, b.cooldown)
	b.shards.newShard = b.newShard
	if err := b.initMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	// Shard 0 always exists, so that the metrics describe a backend that
	// has had no request yet.
	b.shards.get(0).use(b.now().UnixMicro())
	return b, nil
}

// breakerSettings are the gobreaker settings of every shard's breaker.
func breakerSettings(br BreakerOptions, cooldown time.Duration) gobreaker.Settings {
	failures := uint32(cmp.Or(br.Failures, DefaultFailures))
	ratio := br.FailureRatio
	minReq := uint32(cmp.Or(br.MinRequests, DefaultMinRequests))
	st := gobreaker.Settings{
		Name:        "backend",
		MaxRequests: uint32(cmp.Or(br.Probes, DefaultProbes)),
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if c.ConsecutiveFailures >= failures {
				return true
			}
			return ratio > 0 && c.Requests >= minReq && float64(c.TotalFailures) >= ratio*float64(c.Requests)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errCallerGone) || errors.Is(err, errNotThisShard) },
	}
	if ratio > 0 {
		// A rolling window of ten buckets, so the ratio forgets old calls
		// gradually instead of all at once.
		st.Interval = cmp.Or(br.Window, DefaultWindow)
		st.BucketPeriod = max(st.Interval/10, time.Millisecond)
	}
	return st
}

// initMetrics makes the backend's metrics and registers them with reg
// (none when nil).
func (b *Backend) initMetrics(reg prometheus.Registerer) error {
	b.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_backend_errors_total",
		Help: "Failed backend calls by kind: timeout, connection, reply (the backend answered with an error), circuit_open (not attempted), canceled (the caller gave up) or other.",
	}, []string{"kind"})
	b.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_backend_failure_mode_total",
		Help: "Requests answered by the failure mode (error, allow, deny or local) because the backend failed or its circuit breaker was open.",
	}, []string{"mode"})
	b.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_rls_backend_breaker_transitions_total",
		Help: "Circuit breaker state changes of any backend shard, by the state entered (closed, half_open or open).",
	}, []string{"state"})
	for _, k := range errorKinds {
		b.errors.WithLabelValues(k)
	}
	b.failures.WithLabelValues(b.mode.String())
	for s := range State(len(stateNames)) {
		b.transitions.WithLabelValues(s.String())
	}
	if reg != nil {
		if err := register(reg, b.errors, b.failures, b.transitions, stateCollector{b: b,
			state: prometheus.NewDesc("envoy_rls_backend_breaker_state",
				"Circuit breaker state of the backend: 1 for the current state (closed, half_open or open), 0 for the others. With a breaker per shard (Redis Cluster masters) it is the most severe state of any shard: open, else half_open, else closed.",
				[]string{"state"}, nil),
			shards: prometheus.NewDesc("envoy_rls_backend_breaker_shards",
				"Backend shards (Redis Cluster masters; 1 for standalone Redis or Sentinel) whose circuit breaker is in each state.",
				[]string{"state"}, nil),
		}); err != nil {
			return err
		}
	}
	return nil
}

// newShard returns shard id's breaker; shardSet calls it once per id.
func (b *Backend) newShard(id int) *shard {
	sh := &shard{id: id}
	st := b.settings
	st.OnStateChange = func(_ string, from, to gobreaker.State) { b.onStateChange(sh, from, to) }
	sh.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	return sh
}

// onStateChange runs under the shard breaker's lock: it must not call that
// breaker.
func (b *Backend) onStateChange(sh *shard, from, to gobreaker.State) {
	b.transitions.WithLabelValues(convState(to).String()).Inc()
	log := b.log
	if b.routed {
		log = log.With(zap.String("shard", b.nameOf(sh.id)))
	}
	switch to {
	case gobreaker.StateOpen:
		sh.openedAt.Store(b.now().UnixMicro())
		log.Warn("backend circuit breaker opened; answering with the failure mode",
			zap.String("mode", b.mode.String()), zap.Duration("cooldown", b.cooldown),
			zap.String("from", convState(from).String()), zap.Error(sh.lastError()))
	case gobreaker.StateHalfOpen:
		log.Info("backend circuit breaker half-open; probing the backend")
	case gobreaker.StateClosed:
		sh.openedAt.Store(0)
		log.Info("backend circuit breaker closed; backend recovered")
	}
}

func (b *Backend) nameOf(id int) string {
	if b.shardName != nil {
		if n := b.shardName(id); n != "" {
			return n
		}
	}
	return strconv.Itoa(id)
}

func (b *Backend) lastError() error {
	if p := b.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func convState(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	}
	return StateClosed
}

// State returns the breaker's current state; with several shards, the most
// severe state of any shard in use: open, else half-open, else closed.
func (b *Backend) State() State {
	worst := StateClosed
	for _, sh := range b.active() {
		if s := sh.state(); s == StateOpen {
			return StateOpen
		} else if s == StateHalfOpen {
			worst = StateHalfOpen
		}
	}
	return worst
}

// ShardState returns the state of shard id's breaker; a shard that has
// seen no request is closed.
func (b *Backend) ShardState(id int) State {
	if sh := b.shards.lookup(id); sh != nil {
		return sh.state()
	}
	return StateClosed
}

// Mode returns the failure mode.
func (b *Backend) Mode() Mode { return b.mode }

// Every backend layer implements the one contract.
var _ algo.Applier = (*Backend)(nil)

// Apply implements algo.Applier. It calls the primary with a deadline of
// Timeout when the breakers of every shard the request goes to are closed
// (or this call is a half-open probe of theirs): with Options.Routed the
// primary asks them through the gate it finds in its context, right before
// it sends the request; otherwise shard 0's breaker is asked before the
// primary is called. When the primary fails, or one of those breakers is
// open, it answers the whole request with the Mode. When the caller's own
// context ends first it returns an error whatever the mode: a cancelled
// caller does not count against the primary, an expired caller deadline
// does (the primary was too slow for it).
func (b *Backend) Apply(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if len(checks) == 0 {
		// Nothing to ask the primary; a no-op success must not close a
		// half-open breaker.
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g := b.gates.Get().(*gate)
	defer g.release()
	pctx := ctx
	if b.routed {
		pctx = algo.WithShardGate(ctx, g)
	} else if g.allow(0) != nil {
		return b.refused(ctx, at, checks, g)
	}
	cancel := context.CancelFunc(func() {})
	if b.timeout > 0 && !endsWithin(ctx, b.timeout) {
		pctx, cancel = context.WithTimeout(pctx, b.timeout)
	}
	out, err := b.primary.Apply(pctx, at, checks)
	cancel()
	if g.bad != nil {
		// The primary named a shard out of range: a programming error,
		// not the primary's failure.
		return nil, g.bad
	}
	if g.open != nil {
		// The primary sent nothing (algo.ShardGate): a breaker refused.
		return b.refused(ctx, at, checks, g)
	}
	// The shards the request reached; none when the primary answered it
	// without them.
	shards, dones := g.shards, g.dones
	if err == nil {
		for _, d := range dones {
			d(nil)
		}
		return out, nil
	}
	cerr := ctx.Err()
	if errors.Is(cerr, context.Canceled) {
		// The caller went away; that says nothing about the primary.
		for _, d := range dones {
			d(errCallerGone)
		}
		b.errors.WithLabelValues(kindCanceled).Inc()
		return nil, fmt.Errorf("failover: %w", err)
	}
	// A caller deadline that expired first does count: Envoy's deadline is
	// often shorter than Timeout (its rate-limit filter waits 20 ms by
	// default), and a hung primary must still open the breaker then.
	g.blamed = b.blame(err, shards, g.blamed[:0])
	b.lastErr.Store(&err)
	for i, sh := range shards {
		if g.blamed[i] {
			// Store before done: done may open the breaker, which logs
			// lastErr.
			sh.lastErr.Store(&err)
			dones[i](err)
		} else {
			dones[i](errNotThisShard)
		}
	}
	kind := classify(err)
	b.errors.WithLabelValues(kind).Inc()
	if ce := b.log.Check(zap.DebugLevel, "backend call failed"); ce != nil {
		ce.Write(zap.String("kind", kind), zap.String("mode", b.mode.String()), zap.Error(err))
	}
	if cerr != nil {
		// The caller gets no answer whatever the mode; it stopped waiting.
		return nil, fmt.Errorf("failover: %w", err)
	}
	var first *shard
	if len(shards) > 0 {
		first = shards[0]
	}
	return b.fail(ctx, at, checks, first, err)
}

// refused answers a request that g's open breaker refused, before the
// primary sent it, with the failure mode.
func (b *Backend) refused(ctx context.Context, at time.Time, checks []algo.Check, g *gate) ([]algo.Decision, error) {
	b.errors.WithLabelValues(kindOpen).Inc()
	return b.fail(ctx, at, checks, g.open, g.openErr)
}

// endsWithin reports whether ctx's deadline comes within d: then the
// primary is called under ctx as it is. Envoy's rate-limit filter sends a
// deadline of 20 ms by default, under any sane Timeout: context.WithTimeout
// would arm no timer for it either, but would still make, register with
// the caller's context and cancel a context of its own per request.
func endsWithin(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= d
}

// openError is what a request touching sh gets while sh's breaker is open.
func (b *Backend) openError(sh *shard) error {
	if !b.routed {
		return fmt.Errorf("%w (last error: %v)", ErrOpen, sh.lastError())
	}
	return fmt.Errorf("%w (shard %s; last error: %v)", ErrOpen, b.nameOf(sh.id), sh.lastError())
}

// fail answers checks with the failure mode; cause is why the primary did
// not decide and sh the shard whose breaker is open or that failed (nil
// when the primary failed before it reached a shard).
func (b *Backend) fail(ctx context.Context, at time.Time, checks []algo.Check, sh *shard, cause error) ([]algo.Decision, error) {
	b.failures.WithLabelValues(b.mode.String()).Inc()
	switch b.mode {
	case ModeAllow:
		return allowAll(checks), nil
	case ModeDeny:
		return denyAll(checks, b.retryAfter(sh)), nil
	case ModeLocal:
		out, err := b.local.Apply(ctx, at, divide(checks, b.replicas))
		if err != nil {
			return nil, fmt.Errorf("failover: local fallback after %v: %w", cause, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("failover: %w", cause)
}

// allowAll admits every check as if its counter were empty and consumes
// nothing. A consuming check that no state could admit (hits above the
// capacity, which includes a limit of 0 that blocks everything) is denied
// even so: that decision needs no counter, and failing open must not open a
// rule written to block. The request is then denied as a whole, which is
// what the primary would have answered.
func allowAll(checks []algo.Check) []algo.Decision {
	out := make([]algo.Decision, len(checks))
	for i, c := range checks {
		capacity := c.Policy.Capacity()
		out[i] = algo.Decision{Allowed: c.Refund || c.Hits <= capacity, Remaining: capacity}
	}
	return out
}

// denyAll answers as if every counter were exhausted: consuming checks are
// denied with retryAfter (µs), check-only and refund checks are admitted
// with nothing remaining, as Step answers them on an exhausted counter.
func denyAll(checks []algo.Check, retryAfter int64) []algo.Decision {
	out := make([]algo.Decision, len(checks))
	for i, c := range checks {
		if c.Hits > 0 && !c.Refund {
			out[i] = algo.Decision{Allowed: false, ResetAfter: retryAfter, RetryAfter: retryAfter}
			continue
		}
		out[i] = algo.Decision{Allowed: true}
	}
	return out
}

// retryAfter is the deny mode's Retry-After in µs: the rest of sh's
// cool-down, when a probe may find the shard back, or a whole cool-down
// when its breaker is not open (yet), the cool-down has passed or there is
// no shard to blame.
func (b *Backend) retryAfter(sh *shard) int64 {
	cd := b.cooldown.Microseconds()
	if sh == nil {
		return cd
	}
	if opened := sh.openedAt.Load(); opened != 0 {
		if rest := opened + cd - b.now().UnixMicro(); rest > 0 && rest <= cd {
			return rest
		}
	}
	return cd
}

// divide returns checks with each Limit and Burst divided among n replicas,
// rounded up, for the local fallback; checks itself is not modified.
//
// Rounding up keeps every positive limit at 1 or more: rounding down would
// turn a limit smaller than the replica count into 0, which blocks all
// traffic, so a degraded Redis would deny what the rule admits. The cost is
// an over-admission of at most n−1 hits per period across all replicas,
// small next to the error of assuming traffic is spread evenly over the
// replicas at all. A limit of 0 stays 0 (it blocks by design) and a Burst of
// 0 stays 0 (it means "the limit", which is divided already).
func divide(checks []algo.Check, n int64) []algo.Check {
	if n <= 1 {
		return checks
	}
	out := slices.Clone(checks)
	for i := range out {
		out[i].Policy.Limit = share(out[i].Policy.Limit, n)
		out[i].Policy.Burst = share(out[i].Policy.Burst, n)
	}
	return out
}

// share is ⌈v/n⌉ for v > 0, and v otherwise.
func share(v, n int64) int64 {
	if v <= 0 {
		return v
	}
	return (v-1)/n + 1
}

// Ping reports whether the primary is usable, for readiness probes: ErrOpen
// (with the last error) while the breaker of every shard is open, without
// calling the primary; otherwise the primary's own Ping under Timeout, or
// nil when the primary has none. One open shard among closed ones does not
// make Ping fail by itself: the other shards' keys are still decided. Ping
// does not affect the breakers. It reports the primary's health whatever
// the Mode; whether that makes the service unready is the caller's
// decision.
func (b *Backend) Ping(ctx context.Context) error {
	if b.allOpen() {
		return fmt.Errorf("%w (last error: %v)", ErrOpen, b.lastError())
	}
	if b.ping == nil {
		return nil
	}
	if b.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	if err := b.ping(ctx); err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	return nil
}

// register registers every collector, or reports the first that fails
// (a second Backend on one registry, say).
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("failover: register metrics: %w", err)
		}
	}
	return nil
}

// allOpen reports whether the breaker of every shard in use is open.
func (b *Backend) allOpen() bool {
	shards := b.active()
	for _, sh := range shards {
		if sh.state() != StateOpen {
			return false
		}
	}
	return len(shards) > 0
}

// stateCollector exports the breaker states, read at scrape time so that
// an open breaker whose cool-down has passed shows as half-open.
type stateCollector struct {
	b             *Backend
	state, shards *prometheus.Desc
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.shards
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	var count [len(stateNames)]int
	for _, sh := range c.b.active() {
		count[sh.state()]++
	}
	worst := StateClosed
	switch {
	case count[StateOpen] > 0:
		worst = StateOpen
	case count[StateHalfOpen] > 0:
		worst = StateHalfOpen
	}
	for s := range State(len(stateNames)) {
		v := 0.0
		if s == worst {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, s.String())
		ch <- prometheus.MustNewConstMetric(c.shards, prometheus.GaugeValue, float64(count[s]), s.String())
	}
}
