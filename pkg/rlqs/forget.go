package rlqs

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// The forgetting rule. Envoy 1.40 keeps every bucket it ever created and
// reports each one every interval, with zero requests when idle, until the
// server tells it to abandon the bucket; a server that kept them all would
// resolve, read demand for and refresh every bucket ever seen, forever. So
// a stream holds only live buckets:
//
//   - A bucket reported with no requests for idleAfter since its last
//     requests is abandoned: Envoy drops it (its next request re-creates it
//     with a fresh first report), its demand is deleted from the store, and
//     the stream forgets it.
//   - A bucket Envoy stopped naming in its reports for a whole assignment
//     TTL is forgotten without a word: Envoy no longer holds it.
//   - A stream's buckets go with the stream.
//
// What a stream holds is therefore the buckets that saw requests within
// idleAfter (plus a reporting interval), whatever their total over time.

// Reasons a bucket was forgotten, the values of the forgotten metric's
// label.
const (
	forgotIdle       = "idle"
	forgotUnreported = "unreported"
)

// idleAfter is how long a's bucket must go without requests before it is
// abandoned: the assignment's TTL, and for a token bucket at least the
// time Envoy's bucket takes to fill up from empty. Envoy starts a
// re-created bucket full, so abandoning one that was still refilling
// would grant tokens the limit had not yet given back.
func (s *Server) idleAfter(a *Assignment) time.Duration {
	d := s.ttl()
	if a.Kind == "token_bucket" && a.TokensPerFill > 0 {
		fills := (int64(a.MaxTokens) + int64(a.TokensPerFill) - 1) / int64(a.TokensPerFill)
		d = max(d, time.Duration(fills*a.FillIntervalS)*time.Second)
	}
	return d
}

// reportsRequests reports whether a bucket's usage counts any request.
func reportsRequests(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) bool {
	return u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() > 0
}

// markIdle marks the buckets of a report that are to be abandoned: known
// to the stream, reported with no requests, and idle for idleAfter.
func (s *Server) markIdle(now time.Time, ss *streamState, brs []bucketReport) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := range brs {
		if reportsRequests(brs[i].usage) {
			continue
		}
		if prev := ss.sent[brs[i].key]; prev != nil && now.Sub(prev.active) >= s.idleAfter(prev) {
			brs[i].abandon = true
		}
	}
}

// forgetLocked deletes bucket key from ss; ss.mu is held.
func (s *Server) forgetLocked(ss *streamState, key, reason string) {
	if _, ok := ss.sent[key]; !ok {
		return
	}
	delete(ss.sent, key)
	s.cfg.Metrics.buckets.Dec()
	s.cfg.Metrics.forgotten.WithLabelValues(reason).Inc()
}

// abandonAction tells Envoy to drop bucket and stop reporting it.
func abandonAction(bucket map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: bucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// ruleOf is br's rule ID, "" for none.
func ruleOf(br *bucketReport) string {
	if br.rule == nil {
		return ""
	}
	return br.rule.ID
}
