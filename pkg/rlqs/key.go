package rlqs

// The Redis names of RLQS's shared state: each bucket's reported demand is
// one hash, one field per Envoy instance, under the deployment's key
// prefix. They are built here alone (docs/architecture.md,
// "Keys beside the counters").

// usageNamespace follows the deployment's prefix in every usage key.
const usageNamespace = "rlqs:"

// usagePrefix is what every usage key of a deployment with key prefix
// prefix starts with.
func usagePrefix(prefix string) string { return prefix + usageNamespace }

// usageKey is bucket's usage hash under a usagePrefix.
func usageKey(usagePrefix, bucket string) string { return usagePrefix + bucket }
