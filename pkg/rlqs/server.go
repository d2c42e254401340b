package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
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
	Record(ctx context.Context, now time.Time, reps []Report) ([][]demandPerSecond, error)
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
	return &Server{cfg: cfg, streams: map[*streamState]struct{}{}}, nil
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
	mu       sync.Mutex
	// sent is the last assignment per bucket key.
	sent map[string]*Assignment
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
	// Instances is how many instances shared the bucket's limit.
	Instances int `json:"instances,omitempty"`
	// DemandPerSecond is the instance's reported demand (-1 unknown).
	DemandPerSecond float64   `json:"demand_per_second"`
	Sent            time.Time `json:"sent"`
	Expires         time.Time `json:"expires"`
	// Reason says why an assignment is a blanket one.
	Reason string `json:"reason,omitempty"`
}

// StreamRateLimitQuotas serves one Envoy instance: every usage report is
// answered with an assignment for each bucket it names.
func (s *Server) StreamRateLimitQuotas(st rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ss := &streamState{instance: instanceOf(st.Context()), sent: map[string]*Assignment{}}
	s.mu.Lock()
	s.streams[ss] = struct{}{}
	s.mu.Unlock()
	s.cfg.Metrics.streams.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ss)
		s.mu.Unlock()
		s.cfg.Metrics.streams.Dec()
	}()
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		resp := s.handle(st.Context(), ss, m)
		if len(resp.GetBucketAction()) == 0 {
			continue
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

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
	usage *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	key   string
	rule  *rules.Rule
	// lim is the limit the assignment follows (nil: a blanket one).
	lim     *limitPlan
	blanket *Blanket
	reason  string
}

// limitPlan is the binding limit of a rule after the adjusters.
type limitPlan struct {
	limit, burst int64
	periodS      int64
}

// handle answers one usage report.
func (s *Server) handle(ctx context.Context, ss *streamState, m *rlqspb.RateLimitQuotaUsageReports) *rlqspb.RateLimitQuotaResponse {
	now := s.cfg.Now()
	snap := s.cfg.Rules()
	domain := m.GetDomain()
	brs := make([]bucketReport, 0, len(m.GetBucketQuotaUsages()))
	var reps []Report
	for _, u := range m.GetBucketQuotaUsages() {
		b := u.GetBucketId().GetBucket()
		if len(b) == 0 {
			continue // Envoy never sends one; nothing to answer it with.
		}
		br := bucketReport{usage: u, key: BucketKey(domain, b)}
		s.resolve(now, snap, domain, b, &br)
		ruleID := ""
		if br.rule != nil {
			ruleID = br.rule.ID
		}
		s.cfg.Metrics.reported.WithLabelValues(domain, ruleID, "allowed").Add(float64(u.GetNumRequestsAllowed()))
		s.cfg.Metrics.reported.WithLabelValues(domain, ruleID, "denied").Add(float64(u.GetNumRequestsDenied()))
		if br.lim != nil {
			rep := Report{Bucket: br.key, Instance: ss.instance}
			if el := u.GetTimeElapsed().AsDuration(); el >= time.Second {
				rep.PerSecond = float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / el.Seconds()
			} else {
				// A bucket's first report (elapsed 0) says nothing of its rate.
				rep.Unknown = true
			}
			reps = append(reps, rep)
		}
		brs = append(brs, br)
	}
	var demands [][]demandPerSecond
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
	ttl := time.Duration(s.cfg.TTLIntervals) * s.cfg.ReportInterval
	resp := &rlqspb.RateLimitQuotaResponse{}
	k := 0
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := range brs {
		br := &brs[i]
		b := br.usage.GetBucketId().GetBucket()
		a := &Assignment{Instance: ss.instance, Domain: domain, Bucket: b, Sent: now, Expires: now.Add(ttl), DemandPerSecond: -1, Reason: br.reason}
		if br.rule != nil {
			a.Rule = br.rule.ID
		}
		switch {
		case br.lim == nil:
			a.Kind = br.blanket.String()
		case usageErr != nil:
			k++
			if last := ss.sent[br.key]; last != nil && last.Expires.After(now) {
				continue // Envoy still holds it; say nothing.
			}
			a.Kind, a.Reason = s.cfg.FailureMode.String(), "usage store unavailable: failure mode"
		default:
			ds := demands[k]
			rep := reps[k]
			k++
			s.assignShare(a, br.lim, rep, ds)
			s.cfg.Metrics.instances.WithLabelValues(domain, a.Rule).Set(float64(a.Instances))
		}
		ss.sent[br.key] = a
		resp.BucketAction = append(resp.BucketAction, a.action(ttl))
		s.cfg.Metrics.assignments.WithLabelValues(domain, a.Rule, a.Kind).Inc()
	}
	return resp
}

// resolve finds the bucket's rule and the limit that binds it.
func (s *Server) resolve(now time.Time, snap *rules.Snapshot, domain string, b map[string]string, br *bucketReport) {
	blanket := func(v Blanket, reason string) { br.blanket, br.reason = &v, reason }
	if snap == nil {
		blanket(s.cfg.Unknown, "no rules loaded")
		return
	}
	r := snap.Match(domain, Entries(b, s.cfg.KeyOrder))
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
}

// assignShare makes a the instance's fair share of lim among ds.
func (s *Server) assignShare(a *Assignment, lim *limitPlan, rep Report, ds []demandPerSecond) {
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

// Assignments returns the last assignment of every bucket of every
// instance connected to this replica, sorted by domain, bucket and
// instance: for /debug/config.
func (s *Server) Assignments() []Assignment {
	s.mu.Lock()
	streams := make([]*streamState, 0, len(s.streams))
	for ss := range s.streams {
		streams = append(streams, ss)
	}
	s.mu.Unlock()
	var out []Assignment
	for _, ss := range streams {
		ss.mu.Lock()
		for _, a := range ss.sent {
			out = append(out, *a)
		}
		ss.mu.Unlock()
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
