package override

// Every Redis name this package writes is built here
// (docs/architecture.md#redis-data-model; test/arch checks it).

// DefaultRedisKey is the Redis hash that holds the overrides. Its prefix is
// not pkg/redisalgo's ("r3{"), so it never names a counter, and its hash
// tag puts it and the locks (lockKey) in one Cluster slot.
const DefaultRedisKey = "envoy-rls:override:v1:{overrides}"

// lockKey is the Redis key of the lock name in the overrides hash key: it
// shares key's hash tag, so the lock and the hash share a Cluster slot.
func lockKey(key, name string) string { return key + ":lock:" + name }

// AdaptiveLock is the lock name under which one replica at a time adjusts
// the adaptive override of domain's limit (pkg/adaptive).
func AdaptiveLock(domain, limit string) string { return "adaptive:" + domain + "\x00" + limit }
