package app

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/explain"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// RLQSConfig configures the Rate Limit Quota Service served beside
// ShouldRateLimit on the gRPC listener (pkg/rlqs).
type RLQSConfig struct {
	// KeyOrder lists bucket keys in descriptor order (rlqs.Entries).
	KeyOrder []string
	// Unknown is the assignment for buckets no rule matches;
	// FailureMode the one once the usage store has failed past the last
	// assignment's TTL.
	Unknown, FailureMode rlqs.Blanket
	// ReportInterval is Envoy's reporting interval; 0 means Envoy 1.40's
	// fixed 5 s.
	ReportInterval time.Duration
}

// newRLQS builds the RLQS server over the same rules, adjusters and Redis
// as the rate-limit service; demand is shared through Redis when there is
// one, else kept in process (one replica).
func (a *App) newRLQS(cfg RLQSConfig, keyPrefix string) (*rlqs.Server, error) {
	var usage rlqs.Usage
	if a.backend.redis != nil {
		usage = rlqs.NewRedisUsage(a.backend.redis.Universal(), keyPrefix, rlqs.UsageTTL(cfg.ReportInterval))
	}
	return rlqs.New(rlqs.Config{
		Rules:          a.rules.current,
		Adjust:         a.limitAdjusters(),
		Usage:          usage,
		KeyOrder:       cfg.KeyOrder,
		ReportInterval: cfg.ReportInterval,
		Unknown:        cfg.Unknown,
		FailureMode:    cfg.FailureMode,
		Metrics:        rlqs.NewMetrics(a.reg),
		Logger:         a.log.Named("rlqs"),
	})
}

// rlqsQuotas is explain's view of a bucket's RLQS assignments.
func (a *App) rlqsQuotas(domain string, entries []algo.Entry) []explain.QuotaAssignment {
	var out []explain.QuotaAssignment
	for _, as := range a.rlqs.AssignmentsFor(domain, entries) {
		out = append(out, explain.QuotaAssignment{
			Instance: as.Instance, Kind: as.Kind, TokensPerFill: as.TokensPerFill,
			FillIntervalS: as.FillIntervalS, MaxTokens: as.MaxTokens, Instances: as.Instances,
			DemandPerSec: as.DemandPerSecond, Expires: as.Expires.UTC().Format(time.RFC3339), Reason: as.Reason,
		})
	}
	return out
}
