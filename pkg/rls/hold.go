package rls

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Queue mode (`on_limit: delay`): a request over a limit whose backend
// reserved it a later slot (algo.Decision.Delay) is held in its own
// handler until that time, then answered OK. Holding costs a timer and the
// handler's goroutine, which gRPC runs anyway: no goroutine of its own.
// The wait counts from the backend's answer, so a held request passes at
// its reserved time plus the backend's latency: late by that, never early.
//
//   - Bounded: at most HoldConfig.MaxHeld requests are held at once. A
//     request that may queue takes a place before the backend sees it;
//     with none left its limits deny instead of reserving, and a denial
//     that would have queued is counted (envoy_rls_hold_cap_denials_total).
//   - Cancelled: when the caller gives up (its gRPC deadline, Envoy's
//     rate_limit timeout) the reservation is given back where the
//     algorithm allows (algo/reserve.go) and the handler returns the
//     context's error.
//   - Shutdown: ReleaseHeld ends every hold at once, so GracefulStop never
//     waits for a max_delay. A released request is answered OVER_LIMIT and
//     its reservation given back: admitting it early would pass it before
//     its slot and break the limit's rate; denying only under-admits, and
//     Envoy's client may retry on another replica.
//   - Warned: a caller whose deadline (Envoy sends its rate_limit filter's
//     timeout as the gRPC deadline) is shorter than a limit's max_delay
//     gives up before a long hold ends, so the hold only turns into
//     Envoy's timeout. It is logged at Warn, once per limit per
//     shortDeadlineWarnEvery, naming the fix (warnShortDeadline).
//   - Reported: an admitted held request carries the usual headers (of the
//     limit at its reserved time) and X-RateLimit-Reserved-At (Unix µs in
//     the backend's clock, Redis's TIME) and X-RateLimit-Delay-Ms, added
//     whatever --response-headers says.

// DefaultMaxHeld is HoldConfig.MaxHeld's default.
const DefaultMaxHeld = 10_000

// Headers of a held request's answer.
const (
	ReservedAtHeader = "X-RateLimit-Reserved-At"
	DelayHeader      = "X-RateLimit-Delay-Ms"
)

// HoldConfig bounds queue mode.
type HoldConfig struct {
	// MaxHeld is the most requests held at once; 0 means DefaultMaxHeld.
	MaxHeld int
	// Metrics receives the hold metrics; nil disables them.
	Metrics *HoldMetrics
}

// HoldMetrics are the queue mode's Prometheus collectors.
type HoldMetrics struct {
	held      prometheus.Gauge
	delay     prometheus.Histogram
	returned  prometheus.Counter
	capDenied prometheus.Counter
}

// NewHoldMetrics registers the queue mode's collectors on reg.
func NewHoldMetrics(reg prometheus.Registerer) *HoldMetrics {
	m := &HoldMetrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_requests_held",
			Help: "Requests held right now until their reserved time (on_limit: delay).",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "envoy_rls_hold_delay_seconds",
			Help:    "Delay a queued request was reserved, from its arrival to its reserved time.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_reservations_returned_total",
			Help: "Reserved limits given back because their caller gave up or the server shut down (a reservation a later one depends on cannot be, and is not counted).",
		}),
		capDenied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "envoy_rls_hold_cap_denials_total",
			Help: "Requests denied at once that would have been queued, because --max-held requests were already held.",
		}),
	}
	reg.MustRegister(m.held, m.delay, m.returned, m.capDenied)
	return m
}

// shortDeadlineWarnEvery spaces the warnings about one limit's callers
// giving up before its max_delay: one says it, a line per request would
// drown the log.
const shortDeadlineWarnEvery = 10 * time.Minute

// holder counts the held requests and ends them at shutdown.
type holder struct {
	max     int64
	n       atomic.Int64
	metrics *HoldMetrics
	release chan struct{}
	once    sync.Once
	// warned: when each limit ("rule\x00limit") last warned of a short
	// deadline (*atomic.Int64, Unix ns); bounded by the rules' limits.
	warned sync.Map
}

func newHolder(c HoldConfig) *holder {
	m := int64(c.MaxHeld)
	if m <= 0 {
		m = DefaultMaxHeld
	}
	return &holder{max: m, metrics: c.Metrics, release: make(chan struct{})}
}

// ReleaseHeld ends every hold, now and later: held requests are answered
// OVER_LIMIT and their reservations given back, and no request queues
// afterwards. Call it before grpc.Server.GracefulStop. It is idempotent.
func (s *Service) ReleaseHeld() {
	s.held.once.Do(func() { close(s.held.release) })
}

// Held returns the number of requests held right now.
func (s *Service) Held() int { return int(s.held.n.Load()) }

// holdTicket is what prepareHold decided before the backend call.
type holdTicket struct {
	// slot: the request took a place among the held.
	slot bool
	// capped holds the MaxDelays cleared because no place was left.
	capped []int64
}

// prepareHold takes a place for a request that may queue, or clears its
// checks' MaxDelay: under global shadow mode, on soft limits (they never
// deny, so they never wait), on refunds, after ReleaseHeld, and when the
// cap is reached.
func (s *Service) prepareHold(ctx context.Context, p *plan) holdTicket {
	queues := false
	for i := range p.checks {
		c := &p.checks[i]
		if s.cfg.ShadowMode || p.meta[i].soft || c.Refund {
			c.MaxDelay = 0
		}
		queues = queues || c.MaxDelay > 0
	}
	if !queues {
		return holdTicket{}
	}
	s.warnShortDeadline(ctx, p)
	select {
	case <-s.held.release:
		clearMaxDelay(p, nil)
		return holdTicket{}
	default:
	}
	if s.held.n.Add(1) <= s.held.max {
		return holdTicket{slot: true}
	}
	s.held.n.Add(-1)
	capped := make([]int64, len(p.checks))
	clearMaxDelay(p, capped)
	return holdTicket{capped: capped}
}

// applyAndHold applies p's checks and holds the request when they
// reserved a later slot; it returns the reservation it waited for.
func (s *Service) applyAndHold(ctx context.Context, p *plan) (reservation, error) {
	t := s.prepareHold(ctx, p)
	if err := s.apply(ctx, p); err != nil {
		if t.slot {
			s.held.n.Add(-1)
		}
		return reservation{}, err
	}
	return s.hold(ctx, p, t)
}

// warnShortDeadline warns when the caller's deadline is shorter than the
// max_delay of a limit that may hold its request: the caller (Envoy, at its
// rate_limit filter's timeout) would give up before the hold ends, and the
// request would pass or fail by Envoy's failure_mode_deny instead of
// waiting its turn. At most one line per limit per shortDeadlineWarnEvery.
func (s *Service) warnShortDeadline(ctx context.Context, p *plan) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return
	}
	left := time.Until(deadline)
	for i := range p.checks {
		maxDelay := time.Duration(p.checks[i].MaxDelay) * time.Microsecond
		if maxDelay <= 0 || left >= maxDelay {
			continue
		}
		m := &p.meta[i]
		key := m.ruleID + "\x00" + m.limitLabel
		v, ok := s.held.warned.Load(key)
		if !ok {
			v, _ = s.held.warned.LoadOrStore(key, new(atomic.Int64))
		}
		last, now := v.(*atomic.Int64), p.now.UnixNano()
		prev := last.Load()
		if prev != 0 && now-prev < int64(shortDeadlineWarnEvery) || !last.CompareAndSwap(prev, now) {
			continue
		}
		s.log.Warn("a caller's deadline is shorter than a queued limit's max_delay, so it gives up before the hold can end; raise the rate_limit filter's timeout above max_delay, or lower max_delay",
			zap.String("rule", m.ruleID), zap.String("limit", m.limitLabel),
			zap.Duration("deadline", left), zap.Duration("max_delay", maxDelay),
			zap.Duration("repeats_after", shortDeadlineWarnEvery))
	}
}

// clearMaxDelay puts every check in deny mode, saving their MaxDelay in
// saved when it is not nil.
func clearMaxDelay(p *plan, saved []int64) {
	for i := range p.checks {
		if saved != nil {
			saved[i] = p.checks[i].MaxDelay
		}
		p.checks[i].MaxDelay = 0
	}
}

// hold holds p until the latest of its reservations, if any, and gives
// the ticket's place back. It returns the reservation it waited for (zero
// when none, or when ReleaseHeld ended the wait), or the context's error
// when the caller gave up first.
func (s *Service) hold(ctx context.Context, p *plan, t holdTicket) (reservation, error) {
	if !t.slot {
		// Without a place no check kept a MaxDelay, so nothing reserved.
		if t.capped != nil && s.held.metrics != nil && wouldHaveQueued(p, t.capped) {
			s.held.metrics.capDenied.Inc()
		}
		return reservation{}, nil
	}
	defer s.held.n.Add(-1)
	r := latestReservation(p)
	if r.wait == 0 {
		return reservation{}, nil
	}
	if m := s.held.metrics; m != nil {
		m.held.Inc()
		defer m.held.Dec()
		m.delay.Observe(float64(r.wait) / float64(algo.Second))
	}
	timer := time.NewTimer(time.Duration(r.wait) * time.Microsecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return r, nil
	case <-ctx.Done():
		s.returnReservations(ctx, p)
		return reservation{}, status.FromContextError(ctx.Err()).Err()
	case <-s.held.release:
		s.returnReservations(ctx, p)
		for i := range p.decisions {
			if d := &p.decisions[i]; d.Delay > 0 {
				*d = algo.Decision{RetryAfter: d.Delay, ResetAfter: d.ResetAfter + d.Delay}
			}
		}
		return reservation{}, nil
	}
}

// reservation is the latest of a request's reservations: its reserved
// time (Unix µs) and how long the request waits for it (µs); zero when it
// passes at once.
type reservation struct{ at, wait int64 }

// latestReservation is the reservation of p's decisions with the longest
// Delay.
func latestReservation(p *plan) reservation {
	var r reservation
	for _, d := range p.decisions {
		if d.Delay > r.wait {
			r = reservation{at: d.ReservedAt, wait: d.Delay}
		}
	}
	return r
}

// wouldHaveQueued reports whether a denied request had a limit that would
// have queued it with its MaxDelay (saved).
func wouldHaveQueued(p *plan, saved []int64) bool {
	for i, d := range p.decisions {
		if !d.Allowed && d.RetryAfter > 0 && d.RetryAfter <= saved[i] {
			return true
		}
	}
	return false
}

// returnTimeout bounds the backend call that gives reservations back, made
// after the caller's own context ended.
const returnTimeout = time.Second

// returnReservations cancels p's reservations: one refund per reserved
// check, naming its reserved time (algo.Check.ReservedAt). A failure is
// logged: the slots then stay unused, which under-admits.
func (s *Service) returnReservations(ctx context.Context, p *plan) {
	var cancels []algo.Check
	for i, d := range p.decisions {
		c := p.checks[i]
		if d.Delay <= 0 || c.Refund || c.Hits <= 0 {
			continue
		}
		c.Refund, c.Take, c.MaxDelay, c.ReservedAt = true, false, 0, d.ReservedAt
		cancels = append(cancels, c)
	}
	if len(cancels) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), returnTimeout)
	defer cancel()
	ds, err := s.cfg.Backend.Apply(cctx, s.cfg.Now(), cancels)
	if err != nil {
		s.log.Debug("giving back a reservation failed; its slot stays unused", zap.Error(err))
		return
	}
	for _, d := range ds {
		if d.Granted > 0 && s.held.metrics != nil {
			s.held.metrics.returned.Inc()
		}
	}
}

// addHoldHeaders reports an admitted held request's reserved time and delay.
func addHoldHeaders(resp *pb.RateLimitResponse, r reservation) {
	if r.wait == 0 || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		return
	}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: ReservedAtHeader, Value: strconv.FormatInt(r.at, 10)},
		&corev3.HeaderValue{Key: DelayHeader, Value: strconv.FormatFloat(float64(r.wait)/1000, 'f', 3, 64)})
}
