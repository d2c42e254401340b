package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/override"
)

// Overrides is what a controller needs of pkg/override's Table: the live
// overrides, to write its factor, and the lock that lets one replica act
// per interval.
type Overrides interface {
	List(ctx context.Context) ([]override.Override, error)
	Set(ctx context.Context, o override.Override, ttl time.Duration) (override.Override, error)
	Lock(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// Options configure a Controllers.
type Options struct {
	// Prometheus is the server's base URL, "http://prometheus:9090".
	Prometheus string
	// Table receives the factors; required.
	Table Overrides
	// Logger is named "adaptive"; nil discards.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// HTTP queries Prometheus; nil means a client with a timeout of half
	// the interval, within 1 s and 10 s, so a slow server cannot stack up
	// checks.
	HTTP *http.Client
}

// Controllers runs every controller of a file. It is safe for concurrent
// use, though Run is meant to be called once.
type Controllers struct {
	file     *File
	opts     Options
	log      *zap.Logger
	prom     promv1.API
	factor   *prometheus.GaugeVec
	failures *prometheus.CounterVec
	steps    *prometheus.CounterVec
}

// Load reads the controller file at path and returns its controllers.
func Load(path string, opts Options) (*Controllers, error) {
	f, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return New(f, opts)
}

// New returns the controllers of f.
func New(f *File, opts Options) (*Controllers, error) {
	if opts.Table == nil {
		return nil, errors.New("adaptive: New: nil Table")
	}
	if _, err := url.Parse(opts.Prometheus); err != nil || opts.Prometheus == "" {
		return nil, fmt.Errorf("adaptive: --prometheus-url: %q is not a URL (want http://host:port)", opts.Prometheus)
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: min(max(f.interval/2, time.Second), 10*time.Second)}
	}
	client, err := promapi.NewClient(promapi.Config{Address: opts.Prometheus, Client: opts.HTTP})
	if err != nil {
		return nil, fmt.Errorf("adaptive: --prometheus-url: %w", err)
	}
	c := &Controllers{
		file: f, opts: opts, log: zap.NewNop(), prom: promv1.NewAPI(client),
		factor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "envoy_rls_adaptive_factor",
			Help: "The factor an adaptive controller last read or wrote for its limit.",
		}, []string{"domain", "limit"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_adaptive_query_failures_total",
			Help: "Adaptive signal queries that failed, were empty or NaN; the factor was left where it was.",
		}, []string{"domain", "limit", "signal"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_adaptive_steps_total",
			Help: "Adaptive controller checks, by outcome: decrease, increase, hold, pinned (a manual override suspends it), failed, locked (another replica acted).",
		}, []string{"domain", "limit", "outcome"}),
	}
	if opts.Logger != nil {
		c.log = opts.Logger.Named("adaptive")
	}
	if opts.Registerer != nil {
		for _, m := range []prometheus.Collector{c.factor, c.failures, c.steps} {
			if err := opts.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("adaptive: register metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Run checks every controller each interval until ctx ends. It returns
// nil.
func (c *Controllers) Run(ctx context.Context) error {
	tick := time.NewTicker(c.file.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			c.Step(ctx)
		}
	}
}

// Step checks every controller once.
func (c *Controllers) Step(ctx context.Context) {
	for i := range c.file.Controllers {
		ct := &c.file.Controllers[i]
		outcome, err := c.step(ctx, ct)
		c.steps.WithLabelValues(ct.Domain, ct.Limit, outcome).Inc()
		if err != nil {
			c.log.Warn("adaptive check failed; factor left where it was",
				zap.String("domain", ct.Domain), zap.String("limit", ct.Limit), zap.Error(err))
		}
	}
}

// step runs one check of ct and returns its outcome.
func (c *Controllers) step(ctx context.Context, ct *Controller) (string, error) {
	// The lock lasts one interval, so among replicas checking on their own
	// tickers one acts per interval and none stacks changes on another's.
	ok, err := c.opts.Table.Lock(ctx, override.AdaptiveLock(ct.Domain, ct.Limit), c.file.interval)
	if err != nil {
		return "failed", err
	}
	if !ok {
		return "locked", nil
	}
	cur, pinned, err := c.current(ctx, ct)
	if err != nil {
		return "failed", err
	}
	if pinned {
		return "pinned", nil
	}
	// No adaptive override means the configured limit: factor 1.
	factor := 1.0
	if cur != nil {
		factor = cur.Factor
	}
	c.factor.WithLabelValues(ct.Domain, ct.Limit).Set(factor)
	anyHigh, allLow, err := c.signals(ctx, ct)
	if err != nil {
		return "failed", err
	}
	next, outcome := ct.next(factor, anyHigh, allLow)
	now := time.Now()
	changed := next != factor
	if changed && cur != nil && now.Sub(cur.SetAt) < ct.minInterval {
		return "hold", nil
	}
	// Without a change, the factor is rewritten only when half its TTL is
	// gone, so that a controller that holds keeps its factor alive while a
	// dead one's expires and the configured limit returns.
	if !changed && (cur == nil || cur.Expires.Sub(now) > ct.ttl/2) {
		return "hold", nil
	}
	_, err = c.opts.Table.Set(ctx, override.Override{
		Domain: ct.Domain, Limit: ct.Limit, Source: override.Adaptive, Factor: next,
		Reason: "adaptive: " + outcome, By: "adaptive controller",
	}, ct.ttl)
	if err != nil {
		return "failed", err
	}
	c.factor.WithLabelValues(ct.Domain, ct.Limit).Set(next)
	return outcome, nil
}

// signals queries ct's signals: whether any is above its high mark, and
// whether all are below their low marks. The first failure ends the check.
func (c *Controllers) signals(ctx context.Context, ct *Controller) (anyHigh, allLow bool, err error) {
	allLow = true
	for _, s := range ct.Signals {
		v, err := c.query(ctx, s.Query)
		if err != nil {
			c.failures.WithLabelValues(ct.Domain, ct.Limit, s.Name).Inc()
			return false, false, fmt.Errorf("signal %q: %w", s.Name, err)
		}
		anyHigh = anyHigh || v > s.High
		allLow = allLow && v < s.Low
	}
	return anyHigh, allLow, nil
}

// next is the factor after factor given the signals, within the floor and
// ceiling, and the direction it moved: multiplicative decrease when any
// signal is high, additive increase when all are low, else hold.
func (ct *Controller) next(factor float64, anyHigh, allLow bool) (float64, string) {
	next := factor
	switch {
	case anyHigh:
		next = factor * ct.Decrease
	case allLow:
		next = factor + ct.Increase
	}
	// Four decimals: repeated sums of 0.1 must not drift into 0.30000000000000004.
	next = math.Round(min(max(next, ct.Floor), ct.Ceiling)*1e4) / 1e4
	switch {
	case next < factor:
		return next, "decrease"
	case next > factor:
		return next, "increase"
	}
	return next, "hold"
}

// current returns ct's live adaptive override (nil for none) and whether a
// manual override pins the limit.
func (c *Controllers) current(ctx context.Context, ct *Controller) (cur *override.Override, pinned bool, err error) {
	list, err := c.opts.Table.List(ctx)
	if err != nil {
		return nil, false, err
	}
	for i := range list {
		o := &list[i]
		if o.Domain != ct.Domain || o.Limit != ct.Limit {
			continue
		}
		if o.Source == override.Manual {
			return nil, true, nil
		}
		cur = o
	}
	return cur, false, nil
}

// query evaluates q at the current time and returns one number: a scalar,
// or the highest value of a vector (several series are judged by the
// worst). Empty results and NaN are errors.
func (c *Controllers) query(ctx context.Context, q string) (float64, error) {
	v, _, _, err := c.prom.Query(ctx, q, time.Now())
	if err != nil {
		return 0, fmt.Errorf("prometheus: %w", err)
	}
	return resultValue(v)
}

// resultValue reads a scalar or the largest sample of a vector.
func resultValue(v model.Value) (float64, error) {
	var samples []model.SampleValue
	switch v := v.(type) {
	case *model.Scalar:
		samples = append(samples, v.Value)
	case model.Vector:
		for _, s := range v {
			samples = append(samples, s.Value)
		}
	default:
		return 0, fmt.Errorf("result type %s (want scalar or vector)", v.Type())
	}
	if len(samples) == 0 {
		return 0, errors.New("empty result (no series matched)")
	}
	best := math.Inf(-1)
	for _, s := range samples {
		if math.IsNaN(float64(s)) {
			return 0, fmt.Errorf("sample %v is not a number", s)
		}
		best = max(best, float64(s))
	}
	return best, nil
}
