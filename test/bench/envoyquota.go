package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// RLQS in the phase through Envoy (configuration (d), envoy.go): what is
// particular to it. Envoy decides every request from the assignment it
// holds, so there is no per-request call to count; what shows that RLQS
// is in play is envoy-rls's own counters (usage reported, token buckets
// assigned), and what shows that the assignment never runs dry is that
// Envoy denied nothing.

// quotaCounts are envoy-rls's RLQS counters, summed over their labels.
type quotaCounts struct {
	reported     int64 // requests Envoy reported allowed
	denied       int64 // requests Envoy reported denied
	tokenBuckets int64 // token-bucket assignments sent
	usageErrors  int64 // usage store (Redis) failures
}

// quotaCounters scrapes envoy-rls's /metrics for its RLQS counters.
func quotaCounters(ctx context.Context, url string) (quotaCounts, error) {
	var q quotaCounts
	err := fetchMetrics(ctx, url, q.add)
	return q, err
}

// parseQuotaCounters reads the RLQS counters from Prometheus text.
func parseQuotaCounters(r io.Reader) (quotaCounts, error) {
	var q quotaCounts
	err := eachSample(r, q.add)
	return q, err
}

// add counts one sample into q when it is one of its counters.
func (q *quotaCounts) add(series, value string) error {
	var dst *int64
	switch {
	case strings.HasPrefix(series, "envoy_rls_rlqs_reported_requests_total{") && strings.Contains(series, `outcome="allowed"`):
		dst = &q.reported
	case strings.HasPrefix(series, "envoy_rls_rlqs_reported_requests_total{") && strings.Contains(series, `outcome="denied"`):
		dst = &q.denied
	case strings.HasPrefix(series, "envoy_rls_rlqs_assignments_sent_total{") && strings.Contains(series, `kind="token_bucket"`):
		dst = &q.tokenBuckets
	case series == "envoy_rls_rlqs_usage_errors_total":
		dst = &q.usageErrors
	default:
		return nil
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return fmt.Errorf("bench: rlqs metrics: %s %q: %w", series, value, err)
	}
	*dst += int64(v)
	return nil
}

// quotaSizing checks, before the run, that the token bucket envoy-rls
// assigns the bench's one Envoy on a bucket of a rule of limit per second
// never runs dry in an interval: even if all of an interval's requests
// (at most maxRequests, warmup included) fell in one bucket, at any rate,
// the bucket, which starts full, holds them all. The assignment is
// computed as envoy-rls computes it (pkg/rlqs: the lone instance's fair
// share and its burst), for a demand of maxRequests per second.
func quotaSizing(limit, maxRequests int64) error {
	share := rlqs.FairShares(limit, []rlqs.Demand{{Instance: rlqsInstance, PerPeriod: float64(maxRequests)}})[0]
	maxTokens := rlqs.BurstFor(share, limit, 0)
	if share < maxRequests || maxTokens < maxRequests {
		return fmt.Errorf("bench: rlqs: a rule of %d/s assigns a token bucket of %d per second, at most %d tokens: "+
			"it could run dry within %d requests (--max-requests); (d) needs a limit that never denies", limit, share, maxTokens, maxRequests)
	}
	return nil
}

// quotaProblem is problem for (d): no request answered, HTTP errors above
// 1%, any request denied (the token bucket ran dry or an assignment
// denied: the rule never denies, so every request must be admitted), no
// token bucket assigned to this interval's Envoy (RLQS was not in play:
// Envoy admitted on its no-assignment fallback alone), or a usage store
// error.
func (s envoySample) quotaProblem() error {
	switch {
	case s.requests == 0:
		return fmt.Errorf("bench: no request answered (%d errors, first: %v)", s.httpErrors, s.firstErr)
	case s.httpErrors*100 > s.requests:
		return fmt.Errorf("bench: %d HTTP errors in %d requests (first: %v)", s.httpErrors, s.requests, s.firstErr)
	case s.denied > 0:
		return fmt.Errorf("bench: rlqs: Envoy answered %d of %d requests 429: the token bucket ran dry or an assignment denied", s.denied, s.requests)
	case s.tokenBuckets == 0:
		return fmt.Errorf("bench: rlqs: envoy-rls sent this Envoy no token-bucket assignment (%d requests): RLQS was not in play", s.requests)
	case s.usageErrors > 0:
		return fmt.Errorf("bench: rlqs: envoy-rls counted %d usage store failures", s.usageErrors)
	}
	return nil
}
