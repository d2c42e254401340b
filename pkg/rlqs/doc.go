// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3, the rate_limit_quota HTTP filter):
// Envoy groups requests into buckets, enforces an assignment locally
// (allow all, deny all or a token bucket) and streams usage reports; this
// server answers each report with an assignment per bucket.
//
// A bucket id (a map) becomes a descriptor path by Entries and selects a
// rule of the loaded rules in the report's domain, the same rules
// ShouldRateLimit uses, with the same limit adjusters (warm-up, overrides,
// adaptive limits). Each instance's demand per bucket is recorded in a
// Usage store (Redis, shared by every replica, or in process) and the
// rule's limit is split by max-min fairness over the live instances
// (FairShares); an instance gets its share as a token bucket. Assignments
// carry a time to live of a few reporting intervals and are re-sent on
// every report. A bucket idle past its assignment is abandoned in Envoy
// and forgotten (forget.go), so what a replica holds and refreshes is the
// buckets in use, not every bucket ever reported; each stream sends from
// one goroutine, with no lock held across a Send. docs/rlqs.md says what
// is exact and what approximate.
//
// The package reads rules and writes only its own usage keys; it must not
// touch the rate-limit counters or the rule files.
package rlqs
