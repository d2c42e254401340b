package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Blanket is an assignment that admits or denies every request.
type Blanket int

const (
	// AllowAll admits everything.
	AllowAll Blanket = iota
	// DenyAll denies everything.
	DenyAll
)

// ParseBlanket reads "allow" or "deny".
func ParseBlanket(s string) (Blanket, error) {
	switch s {
	case "allow", "allow_all":
		return AllowAll, nil
	case "deny", "deny_all":
		return DenyAll, nil
	}
	return 0, fmt.Errorf("rlqs: %q is neither allow nor deny", s)
}

func (b Blanket) String() string {
	if b == DenyAll {
		return "deny_all"
	}
	return "allow_all"
}

// InstanceHeader is the gRPC metadata key that names an Envoy instance
// (set it in the filter's grpc_service.initial_metadata, one value per
// Envoy). Without it each stream is an instance of its own, and a
// reconnecting Envoy's old entry ages out within the usage TTL.
const InstanceHeader = "x-rlqs-instance"

// Envoy 1.40 reports every 5 s whatever its reporting_interval says
// (docs/rlqs.md).
const defaultReportInterval = 5 * time.Second

// Usage records instances' demand per bucket and returns every live
// instance's demand (MemUsage, RedisUsage). It must be safe for
// concurrent use.
type Usage interface {
	// Record stores reps and returns, per report, every live instance's
	// demand for its bucket, the reporter's included.
	Record(ctx context.Context, now time.Time, reps []Report) ([][]InstanceDemand, error)
	// Demands returns every live instance's demand per bucket key.
	Demands(ctx context.Context, now time.Time, buckets []string) ([][]InstanceDemand, error)
	// Forget removes reps' instances from their buckets' demand at once
	// (a bucket Envoy was told to abandon), instead of letting them expire.
	Forget(ctx context.Context, reps []Report) error
}

// Config configures a Server.
type Config struct {
	// Rules returns the current rules; required.
	Rules func() *rules.Snapshot
	// Adjust are the limit adjusters ShouldRateLimit applies (warm-up,
	// overrides, adaptive limits), in the same order.
	Adjust []rls.LimitAdjuster
	// Usage shares demand across replicas; nil keeps it in process.
	Usage Usage
	// KeyOrder lists bucket keys in descriptor order (Entries).
	KeyOrder []string
	// ReportInterval is how often Envoy reports; 0 means 5 s (Envoy 1.40).
	ReportInterval time.Duration
	// TTLIntervals is an assignment's time to live in report intervals;
	// 0 means 3.
	TTLIntervals int
	// Unknown is sent for a bucket no rule matches.
	Unknown Blanket
	// FailureMode is sent when demand cannot be recorded (Redis down) and
	// the last assignment has expired.
	FailureMode Blanket
	// Refresh is how often Run recomputes the local streams' assignments
	// from the shared demand and pushes those that changed; 0 means 1 s.
	Refresh time.Duration
	// UsageTimeout bounds one Record; 0 means 1 s.
	UsageTimeout time.Duration
	Metrics      *Metrics
	Logger       *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server is the RLQS gRPC service. It is safe for concurrent use.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	cfg Config

	mu      sync.Mutex
	streams map[*streamState]struct{}
	// drained is closed by Drain: every stream ends.
	drained   chan struct{}
	drainOnce sync.Once
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Rules == nil {
		return nil, errors.New("rlqs: Config.Rules is required")
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = defaultReportInterval
	}
	if cfg.TTLIntervals <= 0 {
		cfg.TTLIntervals = 3
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	if cfg.UsageTimeout <= 0 {
		cfg.UsageTimeout = time.Second
	}
	if cfg.Usage == nil {
		cfg.Usage = NewMemUsage(UsageTTL(cfg.ReportInterval))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, streams: map[*streamState]struct{}{}, drained: make(chan struct{})}, nil
}

// UsageTTL is how long an instance's reported demand counts: two
// reporting intervals, so one late report does not drop it, and an
// instance gone for good stops holding a share within two intervals.
func UsageTTL(reportInterval time.Duration) time.Duration {
	if reportInterval <= 0 {
		reportInterval = defaultReportInterval
	}
	return 2*reportInterval + reportInterval/2
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(g, s) }

// streamState is one Envoy instance's stream.
type streamState struct {
	instance string
	// mu guards sent, pending and closed. It is never held across a Send:
	// a flow-controlled Envoy that stops reading must stall only its own
	// stream, not refresh or /debug/config.
	mu sync.Mutex
	// sent is the last assignment per live bucket key: a bucket is added
	// by a report and deleted when it is forgotten (forget.go).
	sent map[string]*Assignment
	// pending are the bucket actions recorded but not yet sent, the newest
	// per bucket key, in the order their keys were first queued. One
	// goroutine sends them (StreamRateLimitQuotas): an action is queued
	// under mu as it is recorded, and a batch is taken whole under mu, so
	// Envoy never gets an older action for a bucket after a newer one.
	// Keeping only the newest bounds the queue by the live buckets however
	// long Envoy stops reading.
	pending map[string]*rlqspb.RateLimitQuotaResponse_BucketAction
	order   []string
	// wake tells the sender that pending is not empty (capacity 1).
	wake chan struct{}
	// closed is set when the stream ended: nothing more is recorded.
	closed bool
}

func newStreamState(instance string) *streamState {
	return &streamState{instance: instance, sent: map[string]*Assignment{},
		pending: map[string]*rlqspb.RateLimitQuotaResponse_BucketAction{}, wake: make(chan struct{}, 1)}
}

// queue records act as the next action to send for bucket key; ss.mu is
// held.
func (ss *streamState) queue(key string, act *rlqspb.RateLimitQuotaResponse_BucketAction) {
	if _, ok := ss.pending[key]; !ok {
		ss.order = append(ss.order, key)
	}
	ss.pending[key] = act
	select {
	case ss.wake <- struct{}{}:
	default: // already signalled
	}
}

// take returns the pending actions as one response and empties the
// queue; nil when nothing is pending.
func (ss *streamState) take() *rlqspb.RateLimitQuotaResponse {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.order) == 0 {
		return nil
	}
	resp := &rlqspb.RateLimitQuotaResponse{BucketAction: make([]*rlqspb.RateLimitQuotaResponse_BucketAction, 0, len(ss.order))}
	for _, key := range ss.order {
		resp.BucketAction = append(resp.BucketAction, ss.pending[key])
	}
	ss.order = ss.order[:0]
	clear(ss.pending)
	return resp
}

// Assignment is what an instance was last told for a bucket.
type Assignment struct {
	Instance string            `json:"instance"`
	Domain   string            `json:"domain"`
	Bucket   map[string]string `json:"bucket"`
	// Rule is the matched rule's ID, "" for none.
	Rule string `json:"rule,omitempty"`
	// Kind is token_bucket, allow_all or deny_all.
	Kind string `json:"kind"`
	// TokensPerFill, FillIntervalS and MaxTokens describe a token bucket.
	TokensPerFill uint32 `json:"tokens_per_fill,omitempty"`
	FillIntervalS int64  `json:"fill_interval_s,omitempty"`
	MaxTokens     uint32 `json:"max_tokens,omitempty"`
	// Instances is how many instances shared the bucket's limit (counting
	// an instance once per bucket when a share_threshold wildcard folds
	// several buckets into one limit).
	Instances int `json:"instances,omitempty"`
	// DemandPerSecond is the instance's reported demand (-1 unknown).
	DemandPerSecond float64   `json:"demand_per_second"`
	Sent            time.Time `json:"sent"`
	Expires         time.Time `json:"expires"`
	// Reason says why an assignment is a blanket one.
	Reason string `json:"reason,omitempty"`
	// failure: sent in the failure mode, while the usage store failed.
	failure bool
	// reported is when Envoy last named the bucket in a report, active
	// when it last reported requests in it (or first reported it): the
	// forgetting rule's clocks (forget.go).
	reported, active time.Time
}

// StreamRateLimitQuotas serves one Envoy instance: every usage report is
// answered with an assignment for each bucket it names. Reports are read
// and answered on a goroutine of their own; this one only sends, so a
// Send that blocks (Envoy stopped reading) holds no lock and delays no
// report of any stream.
func (s *Server) StreamRateLimitQuotas(st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ss := newStreamState(instanceOf(st.Context()))
	s.mu.Lock()
	s.streams[ss] = struct{}{}
	s.mu.Unlock()
	s.cfg.Metrics.streams.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ss)
		s.mu.Unlock()
		s.cfg.Metrics.streams.Dec()
		ss.mu.Lock()
		ss.closed = true
		s.cfg.Metrics.buckets.Sub(float64(len(ss.sent)))
		clear(ss.sent)
		ss.mu.Unlock()
	}()
	// Recv in a goroutine of its own, so that Drain can end the stream
	// while it waits; the stream's end makes that Recv return.
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			s.handle(st.Context(), ss, m)
		}
	}()
	for {
		select {
		case <-s.drained:
			// Envoy reopens the stream on its next report, to a replica
			// that is not shutting down, and keeps its assignments
			// meanwhile.
			return status.Error(codes.Unavailable, "rlqs: server shutting down")
		case err := <-errc:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ss.wake:
			if resp := ss.take(); resp != nil {
				if err := st.Send(resp); err != nil {
					return err
				}
			}
		}
	}
}

// metricDomain labels metrics with domain when a rule file names it, else
// with rls.UnknownDomainLabel: the domain comes from Envoy, and only
// configured names may become label values.
func metricDomain(snap *rules.Snapshot, domain string) string {
	if snap != nil && snap.HasDomain(domain) {
		return domain
	}
	return rls.UnknownDomainLabel
}

// Drain ends every stream, now and from now on: at shutdown, so that the
// gRPC server's graceful stop need not wait for streams that never end.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.drained) }) }

// instanceOf names the Envoy instance behind a stream: its
// InstanceHeader, else a random name of this stream's own.
func instanceOf(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(InstanceHeader); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "stream-" + hex.EncodeToString(b[:])
}

// bucketReport is one bucket of a report, resolved against the rules.
type bucketReport struct {
	usage  *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	bucket map[string]string
	key    string
	rule   *rules.Rule
	// counter names the limit the bucket draws on across replicas (the
	// rule and its counter's entries, CounterKey); set with lim.
	counter string
	// lim is the limit the assignment follows (nil: a blanket one).
	lim     *limitPlan
	blanket *Blanket
	reason  string
	// abandon: the bucket was idle past its assignment (markIdle).
	abandon bool
}

// Bounds on a bucket id: Envoy builds it from configuration and request
// values, and it becomes a Redis key; one beyond them matches no rule.
const (
	maxBucketKeys  = 32
	maxBucketBytes = 4096
)

// checkBucket says what makes bucket id b unusable, or nil.
func checkBucket(b map[string]string) error {
	if len(b) > maxBucketKeys {
		return fmt.Errorf("bucket id has %d keys (at most %d)", len(b), maxBucketKeys)
	}
	n := 0
	for k, v := range b {
		n += len(k) + len(v)
	}
	if n > maxBucketBytes {
		return fmt.Errorf("bucket id is %d bytes (at most %d)", n, maxBucketBytes)
	}
	return nil
}

// member names one instance's use of one bucket among those that share a
// limit: several buckets draw on one limit when a share_threshold wildcard
// makes their values share a counter.
func member(instance, bucketKey string) string { return instance + "\x1f" + bucketKey }

// limitPlan is the binding limit of a rule after the adjusters.
type limitPlan struct {
	limit, burst int64
	periodS      int64
}

// handle answers one usage report: it records the demand and queues an
// action per bucket for the stream's sender. A bucket idle past its
// assignment (forget.go) is abandoned instead: Envoy drops it and stops
// reporting it, and the server forgets it.
func (s *Server) handle(ctx context.Context, ss *streamState, m *rlqspb.RateLimitQuotaUsageReports) {
	now := s.cfg.Now()
	snap := s.cfg.Rules()
	domain := m.GetDomain()
	md := metricDomain(snap, domain)
	brs := make([]bucketReport, 0, len(m.GetBucketQuotaUsages()))
	for _, u := range m.GetBucketQuotaUsages() {
		b := u.GetBucketId().GetBucket()
		if len(b) == 0 {
			continue // Envoy never sends one; nothing to answer it with.
		}
		br := bucketReport{usage: u, bucket: b, key: BucketKey(domain, b)}
		s.resolve(now, snap, domain, b, &br)
		ruleID := ""
		if br.rule != nil {
			ruleID = br.rule.ID
		}
		s.cfg.Metrics.reported.WithLabelValues(md, ruleID, "allowed").Add(float64(u.GetNumRequestsAllowed()))
		s.cfg.Metrics.reported.WithLabelValues(md, ruleID, "denied").Add(float64(u.GetNumRequestsDenied()))
		brs = append(brs, br)
	}
	s.markIdle(now, ss, brs)
	var reps, gone []Report
	for i := range brs {
		br := &brs[i]
		if br.lim == nil {
			continue
		}
		rep := Report{Bucket: br.counter, Instance: member(ss.instance, br.key)}
		if br.abandon {
			gone = append(gone, rep)
			continue
		}
		u := br.usage
		if el := u.GetTimeElapsed().AsDuration(); el >= time.Second {
			rep.PerSecond = float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / el.Seconds()
		} else {
			// A bucket's first report (elapsed 0) says nothing of its rate.
			rep.Unknown = true
		}
		reps = append(reps, rep)
	}
	var demands [][]InstanceDemand
	var usageErr error
	if len(reps) > 0 {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.UsageTimeout)
		demands, usageErr = s.cfg.Usage.Record(rctx, now, reps)
		cancel()
		if usageErr != nil {
			s.cfg.Metrics.storeErrors.Inc()
			s.cfg.Logger.Warn("rlqs: usage store failed; keeping the last assignments until their TTL", zap.Error(usageErr))
		}
	}
	if len(gone) > 0 {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.UsageTimeout)
		if err := s.cfg.Usage.Forget(rctx, gone); err != nil {
			// Harmless: the entries expire within the usage TTL anyway.
			s.cfg.Logger.Debug("rlqs: forgetting abandoned buckets' demand failed", zap.Error(err))
		}
		cancel()
	}
	k := 0
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return // the stream ended while the store answered
	}
	for i := range brs {
		br := &brs[i]
		prev := ss.sent[br.key]
		if br.abandon {
			s.forgetLocked(ss, br.key, forgotIdle)
			ss.queue(br.key, abandonAction(br.bucket))
			s.cfg.Metrics.assignments.WithLabelValues(md, ruleOf(br), "abandon").Inc()
			continue
		}
		var a *Assignment
		switch {
		case br.lim == nil:
			a = s.assignment(now, ss.instance, domain, br, Report{}, nil)
		case usageErr != nil:
			k++
			if prev != nil && prev.Expires.After(now) {
				prev.reported = now
				if reportsRequests(br.usage) {
					prev.active = now
				}
				continue // Envoy still holds it; say nothing.
			}
			a = s.assignment(now, ss.instance, domain, br, Report{}, nil)
			a.Kind, a.Reason, a.failure = s.cfg.FailureMode.String(), "usage store unavailable: failure mode", true
		default:
			a = s.assignment(now, ss.instance, domain, br, reps[k], demands[k])
			a.keepNear(prev)
			k++
		}
		a.reported, a.active = now, now
		if prev != nil && !reportsRequests(br.usage) {
			a.active = prev.active
		}
		if prev == nil {
			s.cfg.Metrics.buckets.Inc()
		}
		ss.sent[br.key] = a
		ss.queue(br.key, a.action(s.ttl()))
		s.cfg.Metrics.assignments.WithLabelValues(md, a.Rule, a.Kind).Inc()
	}
}

func (s *Server) ttl() time.Duration {
	return time.Duration(s.cfg.TTLIntervals) * s.cfg.ReportInterval
}

// assignment is what instance gets for the resolved bucket br: a blanket
// one when br has no limit, else its fair share of the limit among ds.
func (s *Server) assignment(now time.Time, instance, domain string, br *bucketReport, rep Report, ds []InstanceDemand) *Assignment {
	a := &Assignment{Instance: instance, Domain: domain, Bucket: br.bucket, Sent: now, Expires: now.Add(s.ttl()), DemandPerSecond: -1, Reason: br.reason}
	if br.rule != nil {
		a.Rule = br.rule.ID
	}
	if br.lim == nil {
		a.Kind = br.blanket.String()
		return a
	}
	s.assignShare(a, br.lim, rep, ds)
	s.cfg.Metrics.instances.WithLabelValues(domain, a.Rule).Set(float64(a.Instances))
	return a
}

// Run recomputes, every Config.Refresh until ctx ends, the assignment of
// every bucket of every stream on this replica from the shared demand and
// the current rules, and pushes those that changed: an instance that went
// idle hands its share to the others (on any replica) as soon as its
// report says so, not one report later, and a rule change or override
// reaches Envoy within a refresh.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			start := time.Now()
			s.refresh(ctx)
			s.cfg.Metrics.refresh.Observe(time.Since(start).Seconds())
		}
	}
}

// held is one bucket a stream holds, for refresh.
type held struct {
	ss   *streamState
	last Assignment
	key  string
}

// held returns a copy of every bucket's last assignment on every stream.
func (s *Server) held() []held { return s.liveBuckets(time.Time{}) }

// liveBuckets returns held's copy; with a non-zero now it first forgets,
// under the same stream lock, the buckets Envoy has not named in a report
// for an assignment TTL before now, so refresh walks the streams once.
func (s *Server) liveBuckets(now time.Time) []held {
	s.mu.Lock()
	streams := make([]*streamState, 0, len(s.streams))
	for ss := range s.streams {
		streams = append(streams, ss)
	}
	s.mu.Unlock()
	ttl := s.ttl()
	var hs []held
	for _, ss := range streams {
		ss.mu.Lock()
		for key, a := range ss.sent {
			if !now.IsZero() && now.Sub(a.reported) > ttl {
				s.forgetLocked(ss, key, forgotUnreported)
				continue
			}
			hs = append(hs, held{ss: ss, last: *a, key: key})
		}
		ss.mu.Unlock()
	}
	return hs
}

// refresh is one round of Run: it forgets the buckets Envoy stopped
// reporting, then works on the live ones only.
func (s *Server) refresh(ctx context.Context) {
	now := s.cfg.Now()
	snap := s.cfg.Rules()
	hs := s.liveBuckets(now)
	if len(hs) == 0 {
		return
	}
	brs := make([]bucketReport, len(hs))
	var keys []string
	idx := map[string]int{}
	for i, h := range hs {
		brs[i] = bucketReport{key: h.key, bucket: h.last.Bucket}
		s.resolve(now, snap, h.last.Domain, h.last.Bucket, &brs[i])
		if c := brs[i].counter; brs[i].lim != nil {
			if _, ok := idx[c]; !ok {
				idx[c] = len(keys)
				keys = append(keys, c)
			}
		}
	}
	var demands [][]InstanceDemand
	if len(keys) > 0 {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.UsageTimeout)
		var err error
		demands, err = s.cfg.Usage.Demands(rctx, now, keys)
		cancel()
		if err != nil {
			// The report path handles an outage; nothing to push.
			return
		}
	}
	push := map[*streamState][]pushed{}
	for i, h := range hs {
		if h.last.failure {
			continue // failure mode: the next report decides
		}
		var a *Assignment
		if brs[i].lim == nil {
			a = s.assignment(now, h.ss.instance, h.last.Domain, &brs[i], Report{}, nil)
		} else {
			rep := Report{Bucket: brs[i].counter, Instance: member(h.ss.instance, h.key), PerSecond: h.last.DemandPerSecond, Unknown: h.last.DemandPerSecond < 0}
			a = s.assignment(now, h.ss.instance, h.last.Domain, &brs[i], rep, demands[idx[brs[i].counter]])
			a.keepNear(&h.last)
			a.DemandPerSecond = h.last.DemandPerSecond
		}
		if !a.sameStrategy(&h.last) {
			push[h.ss] = append(push[h.ss], pushed{key: h.key, a: a})
		}
	}
	for ss, ps := range push {
		s.deliver(ss, ps, now, snap)
	}
}

// pushed is an assignment refresh pushes, with its bucket key.
type pushed struct {
	key string
	a   *Assignment
}

// deliver records ps on ss and queues them for its sender, skipping
// buckets a report answered (or forgot) since refresh read them.
func (s *Server) deliver(ss *streamState, ps []pushed, readAt time.Time, snap *rules.Snapshot) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, p := range ps {
		cur := ss.sent[p.key]
		if cur == nil || cur.Sent.After(readAt) {
			continue // answered or forgotten since refresh read it
		}
		a := p.a
		a.reported, a.active = cur.reported, cur.active
		ss.sent[p.key] = a
		ss.queue(p.key, a.action(s.ttl()))
		s.cfg.Metrics.assignments.WithLabelValues(metricDomain(snap, a.Domain), a.Rule, a.Kind).Inc()
	}
}

// nearShare is the relative change of an instance's share that is not
// worth a new token bucket: Envoy starts a changed bucket full, so every
// change grants up to max_tokens extra, which costs more than keeping a
// share a few percent off. Below 20 tokens per fill every change counts.
const nearShare = 0.05

// keepNear keeps prev's token bucket when a's differs from it by at most
// nearShare of prev's rate (same fill interval), so small swings in
// reported demand do not refill Envoy's bucket at every report.
func (a *Assignment) keepNear(prev *Assignment) {
	if prev == nil || prev.Kind != "token_bucket" || a.Kind != "token_bucket" || prev.FillIntervalS != a.FillIntervalS {
		return
	}
	diff := int64(a.TokensPerFill) - int64(prev.TokensPerFill)
	if diff < 0 {
		diff = -diff
	}
	if diff <= int64(float64(prev.TokensPerFill)*nearShare) {
		a.TokensPerFill, a.MaxTokens = prev.TokensPerFill, prev.MaxTokens
	}
}

// sameStrategy reports whether a and b tell Envoy the same thing (Envoy
// keeps a token bucket's tokens only when it is unchanged).
func (a *Assignment) sameStrategy(b *Assignment) bool {
	return a.Kind == b.Kind && a.TokensPerFill == b.TokensPerFill && a.MaxTokens == b.MaxTokens && a.FillIntervalS == b.FillIntervalS
}

// resolve finds the bucket's rule and the limit that binds it.
func (s *Server) resolve(now time.Time, snap *rules.Snapshot, domain string, b map[string]string, br *bucketReport) {
	blanket := func(v Blanket, reason string) { br.blanket, br.reason = &v, reason }
	if err := checkBucket(b); err != nil {
		blanket(s.cfg.Unknown, err.Error())
		return
	}
	if snap == nil {
		blanket(s.cfg.Unknown, "no rules loaded")
		return
	}
	entries := Entries(b, s.cfg.KeyOrder)
	r := snap.Match(domain, entries)
	br.rule = r
	switch {
	case r == nil:
		blanket(s.cfg.Unknown, "no rule matches the bucket")
		return
	case r.Unlimited:
		blanket(AllowAll, "unlimited rule")
		return
	case r.ShadowMode:
		blanket(AllowAll, "shadow_mode rule")
		return
	}
	var best *limitPlan
	bestRate := math.Inf(1)
	for i := range r.Limits {
		l := &r.Limits[i]
		pol := rls.EffectiveLimit(s.cfg.Adjust, now, domain, r, l).Policy
		if pol.Limit <= 0 {
			blanket(DenyAll, "blocked: the limit is 0")
			return
		}
		periodS := max((pol.Period+999_999)/1_000_000, 1)
		rate := float64(pol.Limit) / float64(periodS)
		if rate < bestRate {
			bestRate = rate
			best = &limitPlan{limit: pol.Limit, burst: pol.Burst, periodS: periodS}
		}
	}
	if best == nil {
		blanket(AllowAll, "rule has no limits")
		return
	}
	br.lim = best
	br.counter = CounterKey(domain, r, entries)
}

// assignShare makes a the instance's fair share of lim among ds.
func (s *Server) assignShare(a *Assignment, lim *limitPlan, rep Report, ds []InstanceDemand) {
	demands := make([]Demand, 0, len(ds)+1)
	found := false
	for _, d := range ds {
		found = found || d.Instance == rep.Instance
		demands = append(demands, Demand{Instance: d.Instance, PerPeriod: d.PerSecond * float64(lim.periodS), Unknown: d.Unknown})
	}
	if !found {
		// The store lost the entry it was just given (it expired at once):
		// count the instance anyway.
		demands = append(demands, Demand{Instance: rep.Instance, PerPeriod: rep.PerSecond * float64(lim.periodS), Unknown: rep.Unknown})
	}
	// Sorted by instance, so every replica computes the same split.
	mine := 0
	sort.Slice(demands, func(x, y int) bool { return demands[x].Instance < demands[y].Instance })
	for i, d := range demands {
		if d.Instance == rep.Instance {
			mine = i
		}
	}
	share := FairShares(lim.limit, demands)[mine]
	a.Instances = len(demands)
	if !rep.Unknown {
		a.DemandPerSecond = rep.PerSecond
	}
	if share <= 0 {
		a.Kind, a.Reason = DenyAll.String(), "fair share is 0 tokens"
		return
	}
	a.Kind = "token_bucket"
	a.TokensPerFill = uint32(min(share, math.MaxUint32))
	a.FillIntervalS = lim.periodS
	a.MaxTokens = uint32(min(BurstFor(share, lim.limit, lim.burst), math.MaxUint32))
}

// action is a's RLQS bucket action.
func (a *Assignment) action(ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	var strat *typev3.RateLimitStrategy
	switch a.Kind {
	case "token_bucket":
		strat = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     a.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(a.TokensPerFill),
			FillInterval:  durationpb.New(time.Duration(a.FillIntervalS) * time.Second),
		}}}
	case "deny_all":
		strat = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	default:
		strat = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	}
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: a.Bucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				// Envoy 1.40 reads whole seconds only.
				AssignmentTimeToLive: durationpb.New(ttl.Truncate(time.Second)),
				RateLimitStrategy:    strat,
			}},
	}
}

// AssignmentsFor returns the assignments, per instance connected to this
// replica, of the bucket of domain whose descriptor path (Entries) is
// entries: for explain.
func (s *Server) AssignmentsFor(domain string, entries []algo.Entry) []Assignment {
	var out []Assignment
	for _, a := range s.Assignments() {
		if a.Domain == domain && slices.Equal(Entries(a.Bucket, s.cfg.KeyOrder), entries) {
			out = append(out, a)
		}
	}
	return out
}

// Assignments returns the last assignment of every bucket of every
// instance connected to this replica, sorted by domain, bucket and
// instance: for /debug/config.
func (s *Server) Assignments() []Assignment {
	hs := s.held()
	out := make([]Assignment, len(hs))
	for i, h := range hs {
		out[i] = h.last
	}
	sort.Slice(out, func(i, j int) bool {
		ki, kj := BucketKey(out[i].Domain, out[i].Bucket), BucketKey(out[j].Domain, out[j].Bucket)
		if ki != kj {
			return ki < kj
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}
