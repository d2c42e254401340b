package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Config wires a Service. Rules and Backend are required.
type Config struct {
	// Rules returns the current rules snapshot; it is called once per request
	// so that a reload swaps the rules between requests, never within one.
	Rules func() *rules.Snapshot
	// Backend stores the counters.
	Backend Backend
	// DefaultAlgorithm applies to per-request limit overrides; rules carry
	// their own resolved algorithm.
	DefaultAlgorithm algo.Algorithm
	// ShadowMode answers OK to every request while still counting and
	// reporting what would have been denied.
	ShadowMode bool
	// DefaultCharge is the cost of a request's own limit override that
	// matches no rule: a charge (algo.Check.Charge) when set, as
	// --count-denied-hits makes every limit that names no cost (rules
	// carry their own, rules.Limit.Charge).
	DefaultCharge bool
	// Headers selects which rate-limit headers are added to responses.
	Headers HeaderOptions
	// Limits bounds the size of accepted requests.
	Limits RequestLimits
	// MaxRequestCost bounds the state writes one request may cause (the
	// sum of algo.Check.Cost over its checks); a request above it gets
	// INVALID_ARGUMENT before anything is written. 0 means
	// algo.DefaultMaxCost.
	MaxRequestCost int64
	// SlidingLogCap is the largest sliding_log limit, for rules and
	// per-request overrides alike; 0 means algo.DefaultSlidingLogCap.
	SlidingLogCap int64
	// Overrides says what a descriptor's own limit override may do.
	Overrides OverridePolicy
	// Adjust changes configured limits per request (warm-up ramps, runtime
	// overrides), in order; see LimitAdjuster. Limits from a request's own
	// override are not adjusted.
	Adjust []LimitAdjuster
	// Metrics receives per-request observations; nil disables them.
	Metrics *Metrics
	// ReferenceMetrics, when set, also counts every limit's hits under
	// envoyproxy/ratelimit's metric names and labels.
	ReferenceMetrics *ReferenceMetrics
	// Tracer, when set, traces every ShouldRateLimit call (trace.go);
	// nil costs nothing.
	Tracer RequestTracer
	// Top, when set, is told every limit's decision with its counter's
	// key entries, for the console's top clients (pkg/topk); nil costs
	// nothing.
	Top TopRecorder
	// Logger is named "rls" by New; nil means no logging.
	Logger *zap.Logger
	// Now is the clock read once per request, the request's time for every
	// backend on its path; nil means time.Now. Tests inject their own.
	Now func() time.Time
	// Hold bounds queue mode (`on_limit: delay`; hold.go).
	Hold HoldConfig
}

// RequestLimits bounds what one RateLimitRequest may contain. Zero fields
// take the defaults of DefaultRequestLimits.
type RequestLimits struct {
	MaxDescriptors int
	MaxEntries     int
	MaxKeyBytes    int
	MaxValueBytes  int
	MaxHits        uint64
}

// DefaultRequestLimits are generous enough for any Envoy route config while
// still bounding the work and memory one request can cause.
var DefaultRequestLimits = RequestLimits{
	MaxDescriptors: 64,
	MaxEntries:     32,
	MaxKeyBytes:    256,
	MaxValueBytes:  4096,
	MaxHits:        math.MaxUint32,
}

func (l RequestLimits) withDefaults() RequestLimits {
	d := DefaultRequestLimits
	if l.MaxDescriptors > 0 {
		d.MaxDescriptors = l.MaxDescriptors
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxKeyBytes > 0 {
		d.MaxKeyBytes = l.MaxKeyBytes
	}
	if l.MaxValueBytes > 0 {
		d.MaxValueBytes = l.MaxValueBytes
	}
	if l.MaxHits > 0 {
		d.MaxHits = l.MaxHits
	}
	return d
}

// Service implements envoy.service.ratelimit.v3.RateLimitService. It is safe
// for concurrent use.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	cfg    Config
	limits RequestLimits
	log    *zap.Logger
	plans  sync.Pool
	held   *holder
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Rules == nil {
		return nil, errors.New("rls: config.Rules is required")
	}
	if cfg.Backend == nil {
		return nil, errors.New("rls: config.Backend is required")
	}
	if cfg.DefaultAlgorithm == 0 {
		cfg.DefaultAlgorithm = algo.SlidingWindow
	}
	if cfg.MaxRequestCost < 0 {
		return nil, fmt.Errorf("rls: max request cost %d must be 0 (default) or positive", cfg.MaxRequestCost)
	}
	if cfg.SlidingLogCap != 0 {
		if err := algo.ValidateSlidingLogCap(cfg.SlidingLogCap); err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxRequestCost == 0 {
		cfg.MaxRequestCost = algo.DefaultMaxCost
	}
	if cfg.SlidingLogCap == 0 {
		cfg.SlidingLogCap = algo.DefaultSlidingLogCap
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Service{cfg: cfg, limits: cfg.Limits.withDefaults(), log: log.Named("rls"), held: newHolder(cfg.Hold)}
	s.plans.New = func() any { return new(plan) }
	return s, nil
}

// UnknownDomainHeader is the gRPC response header that names a request's
// domain when the rules have no such domain (its answer is then OK, with no
// limit, as envoyproxy/ratelimit answers).
const UnknownDomainHeader = "envoy-rls-unknown-domain"

// noRulesMsg answers a request that comes before any rules.
const noRulesMsg = "rls: no rules loaded"

// ShouldRateLimit answers one Envoy rate-limit request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	var start time.Time
	if s.cfg.Metrics != nil || s.cfg.ReferenceMetrics != nil {
		start = time.Now()
	}
	var span RequestSpan
	if s.cfg.Tracer != nil {
		ctx, span = s.cfg.Tracer.Start(ctx, req.GetDomain(), len(req.GetDescriptors()))
	}
	snap := s.cfg.Rules()
	known := snap.HasDomain(req.GetDomain())
	domainLabel := UnknownDomainLabel
	if known {
		domainLabel = req.GetDomain()
	} else if snap != nil {
		// Envoy answers such a request as allowed, so a typo in its
		// domain: turns limiting off without a word. The answer cannot
		// say it; a header of the gRPC response can, for our own client
		// (envoy-rls check). It is rare, so it costs the request path
		// nothing. Outside a gRPC call (/json) there is no header to set.
		_ = grpc.SetHeader(ctx, metadata.Pairs(UnknownDomainHeader, req.GetDomain()))
	}
	resp, err := s.decide(ctx, req, snap, known, domainLabel)
	if !start.IsZero() {
		elapsed := time.Since(start)
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.observeRequest(domainLabel, resp, err, elapsed)
		}
		if s.cfg.ReferenceMetrics != nil {
			s.cfg.ReferenceMetrics.svc.observeCall(err, elapsed)
		}
	}
	if span != nil {
		span.Finish(resp.GetOverallCode().String(), err)
	}
	return resp, err
}

// decide answers req; known is whether snap has req's domain, looked up
// once by the caller.
func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest, snap *rules.Snapshot, known bool, domainLabel string) (*pb.RateLimitResponse, error) {
	if err := s.limits.validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, "rls: invalid request: "+err.Error())
	}
	if snap == nil {
		return nil, status.Error(codes.Unavailable, noRulesMsg)
	}
	p := s.plans.Get().(*plan)
	defer func() { p.reset(); s.plans.Put(p) }()
	p.now = s.cfg.Now()

	if err := p.build(req, snap, known, s.overrides(), s.cfg.Adjust); err != nil {
		return nil, status.Error(codes.InvalidArgument, "rls: invalid request: "+err.Error())
	}
	if cost := p.cost(); cost > s.cfg.MaxRequestCost {
		return nil, status.Errorf(codes.InvalidArgument,
			"rls: invalid request: cost %d above the limit %d (one per limit, and one per hit on a sliding_log limit; the server's --max-request-cost)",
			cost, s.cfg.MaxRequestCost)
	}
	if s.cfg.Metrics != nil && p.overridesIgnored > 0 {
		s.cfg.Metrics.observeIgnoredOverrides(domainLabel, p.overridesIgnored)
	}
	var held reservation
	if len(p.checks) > 0 {
		var err error
		if held, err = s.applyAndHold(ctx, p); err != nil {
			// Per request at Debug: during an outage every request fails,
			// and the backend's own breaker logs the transitions once.
			s.log.Debug("backend failed", zap.String("domain", req.GetDomain()), zap.Error(err))
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Error(codes.Unavailable, fmt.Sprintf("rls: rate-limit backend unavailable: %v", err))
		}
	}
	resp := p.response(req, s.cfg.ShadowMode, s.cfg.Headers)
	addHoldHeaders(resp, held)
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.observeChecks(domainLabel, p, s.cfg.ShadowMode)
	}
	if s.cfg.ReferenceMetrics != nil {
		s.cfg.ReferenceMetrics.observe(p)
	}
	if s.cfg.Top != nil {
		s.recordTop(domainLabel, p)
	}
	s.logDecision(req, resp, p)
	return resp, nil
}

// overrides is how plan.build treats limit overrides.
func (s *Service) overrides() overrideRules {
	return overrideRules{policy: s.cfg.Overrides, defaultAlgo: s.cfg.DefaultAlgorithm, logCap: s.cfg.SlidingLogCap, defaultCharge: s.cfg.DefaultCharge}
}

// apply runs the plan's checks on the backend, as
// docs/architecture.md#all-or-nothing says: a denied request consumes
// nothing but its charges. A soft limit (shadow or quota mode, or every
// limit under global shadow mode) must not stop the other limits from
// consuming: the request really passes, so it must be counted. When only
// soft limits denied, the request is applied again without the denied
// soft limits, whose first decisions are kept, and without its charges,
// which the first run counted whatever it decided.
func (s *Service) apply(ctx context.Context, p *plan) error {
	p.selectChecks(func(int) bool { return true })
	if err := s.run(ctx, p); err != nil {
		return err
	}
	soft := func(i int) bool { return s.cfg.ShadowMode || p.meta[i].soft }
	if !p.onlySoftDenied(soft) {
		return nil
	}
	p.selectChecks(func(i int) bool { return !p.checks[i].Charge && (!soft(i) || p.decisions[i].Allowed) })
	if len(p.batch) == 0 {
		return nil
	}
	return s.run(ctx, p)
}

// run applies p.batch and spreads the decisions back to the checks.
func (s *Service) run(ctx context.Context, p *plan) error {
	decisions, err := s.cfg.Backend.Apply(ctx, p.now, p.batch)
	if err != nil {
		return err
	}
	if len(decisions) != len(p.batch) {
		return fmt.Errorf("rls: backend returned %d decisions for %d checks", len(decisions), len(p.batch))
	}
	for i, j := range p.owner {
		if j >= 0 {
			p.decisions[i] = decisions[j]
		}
	}
	return nil
}
