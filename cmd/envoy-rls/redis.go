package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
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
	breaker          struct {
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

// validate checks the Redis flags, naming the flag in each error; it runs
// even without --redis-url, so a typo never waits for the day Redis is
// configured.
func (r *redisFlags) validate() (failover.Mode, error) {
	var errs []error
	mode, err := failover.ParseMode(r.failureMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("--redis-failure-mode: %w", err))
	}
	if r.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--redis-timeout: %v must be positive", r.timeout))
	}
	if r.denyCacheEntries < 0 {
		errs = append(errs, fmt.Errorf("--redis-deny-cache-entries: %d must be 0 (off) or positive", r.denyCacheEntries))
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
	if r.breaker.cooldown <= 0 {
		errs = append(errs, fmt.Errorf("--redis-breaker-cooldown: %v must be positive", r.breaker.cooldown))
	}
	if r.breaker.probes < 1 || r.breaker.probes > 1000 {
		errs = append(errs, fmt.Errorf("--redis-breaker-probes: %d must be between 1 and 1000", r.breaker.probes))
	}
	return mode, errors.Join(errs...)
}

// newRedisBackend returns the Redis backend behind the failure policy and
// circuit breaker of pkg/failover. The returned backend's Ping is the
// readiness check (see redisBackend.Ping).
func newRedisBackend(ctx context.Context, cfg *serveConfig, log *zap.Logger, reg prometheus.Registerer) (rls.Backend, func(), error) {
	mode, err := cfg.redis.validate()
	if err != nil {
		return nil, nil, err
	}
	opts, err := redisclient.ParseURL(cfg.redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("--redis-url: %w", err)
	}
	if !cfg.redis.tls.IsZero() {
		if err := opts.SetTLS(cfg.redis.tls); err != nil {
			return nil, nil, fmt.Errorf("--redis-tls-*: %w", err)
		}
	}
	opts.SetTimeouts(cfg.redis.timeout)
	if cfg.redis.poolSize > 0 {
		opts.SetPoolSize(cfg.redis.poolSize)
	}
	redis.SetLogger(redisLogger{log.Named("redis")})
	client, err := redisclient.New(opts)
	if err != nil {
		return nil, nil, err
	}
	// LazyLoad lets the service start while Redis is down; the failure mode
	// answers until it is back, and NOSCRIPT handling loads the script then.
	b, err := newRedisAlgo(client, redisalgo.Options{Logger: log, LazyLoad: true, Registerer: reg, MaxCallCost: cfg.maxRequestCost})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, cfg.redis.timeout)
	if err := b.LoadScript(lctx); err != nil {
		log.Warn("redis not reachable at start; answering with the failure mode until it is",
			zap.String("mode", mode.String()), zap.Error(err))
	}
	cancel()

	fo := failover.Options{
		Mode:             mode,
		ExpectedReplicas: cfg.redis.expectedReplicas,
		Timeout:          cfg.redis.timeout,
		Breaker: failover.BreakerOptions{
			Failures:     cfg.redis.breaker.failures,
			FailureRatio: cfg.redis.breaker.ratio,
			Cooldown:     cfg.redis.breaker.cooldown,
			Probes:       cfg.redis.breaker.probes,
		},
		// One breaker per Redis Cluster master (one in all for standalone
		// and Sentinel): a dead master's keys get the failure mode, the
		// others' keep being decided by Redis.
		Shard:      b.Shard,
		ShardName:  b.ShardName,
		Logger:     log,
		Registerer: reg,
	}
	stopSweep := func() {}
	if mode == failover.ModeLocal {
		store, err := memstore.New(memstore.Options{MaxKeys: cfg.memstoreMaxKeys, Registerer: reg})
		if err != nil {
			b.Close()
			client.Close()
			return nil, nil, fmt.Errorf("local failure-mode store: %w", err)
		}
		sctx, cancel := context.WithCancel(context.Background())
		go store.Run(sctx, 10*time.Second)
		fo.Local, stopSweep = store, cancel
	}
	if err := fo.Validate(); err != nil {
		stopSweep()
		b.Close()
		client.Close()
		return nil, nil, err
	}
	closeAll := func() {
		stopSweep()
		b.Close()
		client.Close()
	}
	// The deny cache sits inside the failure policy: outside it, the answers
	// of the deny and local modes would be cached and outlive Redis's return.
	var primary failover.Limiter = b
	if cfg.redis.denyCacheEntries > 0 {
		dc, err := denycache.New(b, denycache.Options{MaxEntries: cfg.redis.denyCacheEntries, Registerer: reg})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		primary = dc
	}
	return redisBackend{Backend: failover.New(primary, fo), log: log}, closeAll, nil
}

// newRedisAlgo returns the Redis backend over client: the cluster one,
// grouping each request's keys by hash slot, when client is a cluster's.
func newRedisAlgo(client *redisclient.Client, opts redisalgo.Options) (*redisalgo.Backend, error) {
	if client.Cluster != nil {
		return redisalgo.NewCluster(client.Cluster, opts)
	}
	return redisalgo.New(client.Single, opts)
}

// redisBackend adds the readiness policy to the failover-wrapped backend.
//
// With --redis-failure-mode=error, a Redis that is down (or an open breaker)
// makes /readyz fail: every request would get UNAVAILABLE anyway, and a
// load balancer may find a replica whose Redis works. With allow, deny or
// local the operator chose how to answer without Redis, and every replica
// shares the same Redis: failing readiness would pull all of them out of
// the Service and turn the chosen policy into connection errors, which
// Envoy then treats by its own failure_mode_deny. So those modes stay
// ready; the outage shows in envoy_rls_backend_breaker_state,
// envoy_rls_backend_errors_total, envoy_rls_backend_failure_mode_total and
// a warning logged at each readiness probe.
type redisBackend struct {
	*failover.Backend
	log *zap.Logger
}

// Ping is the readiness check; see redisBackend.
func (r redisBackend) Ping(ctx context.Context) error {
	err := r.Backend.Ping(ctx)
	if err == nil || r.Mode() == failover.ModeError {
		return err
	}
	r.log.Warn("redis unavailable; staying ready and answering with the failure mode",
		zap.String("mode", r.Mode().String()), zap.String("breaker", r.State().String()), zap.Error(err))
	return nil
}

// redisLogger sends go-redis's own messages (dial and pool failures) to the
// service's JSON log; its default logger writes plain lines to stderr.
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
}
