package serveconfig

import (
	"errors"
	"fmt"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/lease"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

// Breaker defaults for the service; see register.
const (
	defaultBreakerFailures = 100
	defaultBreakerRatio    = 0.5
)

// redisFlags configure the Redis client and what happens when Redis fails.
type redisFlags struct {
	timeout          time.Duration
	poolSize         int
	tls              redisclient.TLSFiles
	failureMode      string
	expectedReplicas int
	denyCacheEntries int
	perSecondURL     string
	keyPrefix        string
	counterHashes    int
	batchLinger      time.Duration
	lease            struct {
		ttl         time.Duration
		hotRPS      float64
		maxFraction float64
	}
	breaker struct {
		failures int
		ratio    float64
		cooldown time.Duration
		probes   int
	}
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.timeout, "redis-timeout", 100*time.Millisecond, "dial, read and write timeout for Redis, and the longest a request waits for Redis; keep it short, Envoy waits on it")
	fs.IntVar(&r.poolSize, "redis-pool-size", 0, "connections per Redis node (0: go-redis default, 10 per CPU)")
	fs.StringVar(&r.tls.CAFile, "redis-tls-ca", "", "PEM CA bundle to verify Redis (implies TLS)")
	fs.StringVar(&r.tls.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis")
	fs.StringVar(&r.tls.KeyFile, "redis-tls-key", "", "PEM client key for Redis")
	fs.StringVar(&r.failureMode, "redis-failure-mode", "error", "when Redis fails: error (UNAVAILABLE; Envoy's failure_mode_deny decides) | allow | deny | local (in-process limits divided by --expected-replicas)")
	fs.IntVar(&r.denyCacheEntries, "redis-deny-cache-entries", 100_000, "counters this replica remembers as denied until their reset, answering them without a Redis call; 0 turns the cache off")
	fs.StringVar(&r.perSecondURL, "redis-persecond-url", "", "a second Redis URL for the limits whose period is a second or less (envoyproxy/ratelimit's REDIS_PERSECOND); a request spanning both Redis stays all or nothing; empty keeps every limit on --redis-url")
	fs.StringVar(&r.keyPrefix, "redis-key-prefix", "", "prefix of every Redis key (envoyproxy/ratelimit's CACHE_KEY_PREFIX), so deployments can share a Redis; must not contain '{' or '}'")
	fs.IntVar(&r.counterHashes, "redis-counter-hashes", redisalgo.DefaultCounterHashes, fmt.Sprintf("hashes that one fixed-window policy's counters of a window spread over in Redis (1 to %d); size it so a hash holds about 64 counters at the peak (docs/redis.md); every replica must use the same value: it is recorded in Redis, and a replica with another is not ready", redisalgo.MaxCounterHashes))
	fs.DurationVar(&r.batchLinger, "redis-batch-linger", 0, fmt.Sprintf("how long a request that finds no Redis round trip in flight waits for others to share its script call (0 to %v); trades latency for Redis CPU at moderate load", redisalgo.MaxBatchLinger))
	fs.DurationVar(&r.lease.ttl, "lease-ttl", lease.DefaultTTL, "how long a lease of hits on a hot counter (rules with lease: auto) lives before its unused hits go back to Redis; 0 turns leasing off")
	fs.Float64Var(&r.lease.hotRPS, "lease-hot-rps", lease.DefaultHotRPS, "hits per second this replica must see on a counter before it leases; colder counters always go to Redis")
	fs.Float64Var(&r.lease.maxFraction, "lease-max-fraction", lease.DefaultMaxFraction, "largest share (0..1] of a counter's remaining quota one lease may take, so that replicas share it")
	fs.IntVar(&r.expectedReplicas, "expected-replicas", 1, "envoy-rls replicas sharing the limits; failure mode local divides each limit by it, rounding up")
	// The defaults must not let one short stall trip the breaker: with
	// pipelining, every request queued behind a slow reply fails at once,
	// so a consecutive count alone would open it (and refuse traffic for a
	// cool-down) on a hiccup that cost a few milliseconds.
	fs.IntVar(&r.breaker.failures, "redis-breaker-failures", defaultBreakerFailures, "consecutive failed Redis calls that open the circuit breaker (then requests get the failure mode at once, without waiting for Redis); on Redis Cluster each master has a breaker of its own")
	fs.Float64Var(&r.breaker.ratio, "redis-breaker-failure-ratio", defaultBreakerRatio, "also open the breaker when this share (0..1) of at least 20 Redis calls in 10s failed; 0 turns it off")
	fs.DurationVar(&r.breaker.cooldown, "redis-breaker-cooldown", failover.DefaultCooldown, "how long the open breaker waits before probing Redis again")
	fs.IntVar(&r.breaker.probes, "redis-breaker-probes", failover.DefaultProbes, "calls the half-open breaker sends to Redis; that many successes close it")
}

// counterHashesError checks --redis-counter-hashes for every command that
// names counters (serve, explain, inspect): unlike
// redisalgo.Options.CounterHashes the flag has no "0 means the default",
// since a value that differs from the deployment's names other hashes.
func counterHashesError(n int) error {
	if n < 1 || n > redisalgo.MaxCounterHashes {
		return fmt.Errorf("--redis-counter-hashes: %d must be between 1 and %d (the deployment's value, the same on every replica)", n, redisalgo.MaxCounterHashes)
	}
	return nil
}

// validate checks the Redis flags, naming the flag in each error; it runs
// even without --redis-url, so a typo never waits for the day Redis is
// configured.
func (r *redisFlags) validate() (failover.Mode, error) {
	var errs []error
	mode, err := failover.ParseMode(r.failureMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("--redis-failure-mode: %w", err))
	}
	errs = append(errs, flagenv.Positive("--redis-timeout", r.timeout), flagenv.Positive("--redis-breaker-cooldown", r.breaker.cooldown))
	if r.denyCacheEntries < 0 {
		errs = append(errs, fmt.Errorf("--redis-deny-cache-entries: %d must be 0 (off) or positive", r.denyCacheEntries))
	}
	if err := redisalgo.ValidateKeyPrefix(r.keyPrefix); err != nil {
		errs = append(errs, fmt.Errorf("--redis-key-prefix: %w", err))
	}
	errs = append(errs, counterHashesError(r.counterHashes))
	if err := redisalgo.ValidateBatchLinger(r.batchLinger); err != nil {
		errs = append(errs, fmt.Errorf("--redis-batch-linger: %w", err))
	}
	if r.lease.ttl < 0 {
		errs = append(errs, fmt.Errorf("--lease-ttl: %v must be 0 (off) or positive", r.lease.ttl))
	}
	if !(r.lease.hotRPS > 0) {
		errs = append(errs, fmt.Errorf("--lease-hot-rps: %v must be positive", r.lease.hotRPS))
	}
	if !(r.lease.maxFraction > 0 && r.lease.maxFraction <= 1) {
		errs = append(errs, fmt.Errorf("--lease-max-fraction: %v must be above 0 and at most 1", r.lease.maxFraction))
	}
	if r.poolSize < 0 {
		errs = append(errs, fmt.Errorf("--redis-pool-size: %d must be 0 (default) or positive", r.poolSize))
	}
	if r.expectedReplicas < 1 {
		errs = append(errs, fmt.Errorf("--expected-replicas: %d must be at least 1", r.expectedReplicas))
	}
	if r.breaker.failures < 1 {
		errs = append(errs, fmt.Errorf("--redis-breaker-failures: %d must be at least 1", r.breaker.failures))
	}
	if !(r.breaker.ratio >= 0 && r.breaker.ratio <= 1) {
		errs = append(errs, fmt.Errorf("--redis-breaker-failure-ratio: %v must be between 0 (off) and 1", r.breaker.ratio))
	}
	if r.breaker.probes < 1 || r.breaker.probes > 1000 {
		errs = append(errs, fmt.Errorf("--redis-breaker-probes: %d must be between 1 and 1000", r.breaker.probes))
	}
	return mode, errors.Join(errs...)
}

// backendConfig is the backend stack and the Redis clients the flags
// describe.
func (c *Settings) backendConfig(mode failover.Mode) (app.BackendConfig, error) {
	bc := app.BackendConfig{Stack: c.redis.stackConfig(mode)}
	bc.Stack.MaxCallCost, bc.Stack.MemstoreMaxKeys = c.maxRequestCost, c.memstoreMaxKeys
	var err error
	if c.redisURL != "" {
		if bc.Redis, err = c.redis.clientOptions("--redis-url", c.redisURL); err != nil {
			return bc, err
		}
	}
	if c.redis.perSecondURL != "" {
		if bc.PerSecondRedis, err = c.redis.clientOptions("--redis-persecond-url", c.redis.perSecondURL); err != nil {
			return bc, err
		}
	}
	return bc, nil
}

// clientOptions are the options of a client for rawURL, given by flag,
// with the Redis flags' TLS files, timeout and pool size.
func (r *redisFlags) clientOptions(flag, rawURL string) (*redisclient.Options, error) {
	opts, err := redisclient.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !r.tls.IsZero() {
		if err := opts.SetTLS(r.tls); err != nil {
			return nil, fmt.Errorf("--redis-tls-*: %w", err)
		}
	}
	opts.SetTimeouts(r.timeout)
	if r.poolSize > 0 {
		opts.SetPoolSize(r.poolSize)
	}
	return opts, nil
}

// stackConfig is the backend stack the flags describe, without its client.
func (r *redisFlags) stackConfig(mode failover.Mode) stack.Config {
	return stack.Config{
		Timeout:          r.timeout,
		FailureMode:      mode,
		ExpectedReplicas: r.expectedReplicas,
		Breaker: failover.BreakerOptions{
			Failures:     r.breaker.failures,
			FailureRatio: r.breaker.ratio,
			Cooldown:     r.breaker.cooldown,
			Probes:       r.breaker.probes,
		},
		DenyCacheEntries: r.denyCacheEntries,
		KeyPrefix:        r.keyPrefix,
		CounterHashes:    r.counterHashes,
		BatchLinger:      r.batchLinger,
		Lease:            lease.Options{TTL: r.lease.ttl, HotRPS: r.lease.hotRPS, MaxFraction: r.lease.maxFraction},
	}
}

// CounterKeys name the Redis keys of the counters: --redis-key-prefix and
// --redis-counter-hashes, which explain and inspect need to be the
// deployment's.
type CounterKeys struct {
	Prefix string
	Hashes int
}

// CounterKeys checks --redis-key-prefix and --redis-counter-hashes and
// returns them.
func (c *Settings) CounterKeys() (CounterKeys, error) {
	if err := redisalgo.ValidateKeyPrefix(c.redis.keyPrefix); err != nil {
		return CounterKeys{}, fmt.Errorf("--redis-key-prefix: %w", err)
	}
	if err := counterHashesError(c.redis.counterHashes); err != nil {
		return CounterKeys{}, err
	}
	return CounterKeys{Prefix: c.redis.keyPrefix, Hashes: c.redis.counterHashes}, nil
}

// RedisURL is --redis-url; empty runs on the in-process store.
func (c *Settings) RedisURL() string { return c.redisURL }

// RedisTimeout is --redis-timeout.
func (c *Settings) RedisTimeout() time.Duration { return c.redis.timeout }

// RedisOptions are the options of a client of --redis-url, with the
// Redis flags' TLS files, timeout and pool size.
func (c *Settings) RedisOptions() (*redisclient.Options, error) {
	return c.redis.clientOptions("--redis-url", c.redisURL)
}
