package denycache

import "github.com/envoy-rls/envoy-rls/pkg/algo"

// queueSlack is how much sooner than its RetryAfter a denied check may be
// admitted: a queue-mode bucket check (algo.Check.MaxDelay) queues as soon
// as its wait is within MaxDelay, so its denial holds only until
// RetryAfter − MaxDelay. Caching it longer would deny requests that would
// have queued.
func queueSlack(c *algo.Check) int64 {
	if spec, _ := c.Policy.Algorithm.Spec(); c.MaxDelay > 0 && spec.MayQueue && !c.Take {
		return c.MaxDelay
	}
	return 0
}
