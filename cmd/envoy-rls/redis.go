package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// redisFlags configure the Redis client and what happens when Redis fails.
type redisFlags struct {
	timeout          time.Duration
	poolSize         int
	tls              redisalgo.TLSFiles
	failureMode      string
	expectedReplicas int
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.timeout, "redis-timeout", 100*time.Millisecond, "dial, read and write timeout for Redis; keep it short, Envoy waits on it")
	fs.IntVar(&r.poolSize, "redis-pool-size", 0, "connections per Redis node (0: go-redis default, 10 per CPU)")
	fs.StringVar(&r.tls.CAFile, "redis-tls-ca", "", "PEM CA bundle to verify Redis (implies TLS)")
	fs.StringVar(&r.tls.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis")
	fs.StringVar(&r.tls.KeyFile, "redis-tls-key", "", "PEM client key for Redis")
	fs.StringVar(&r.failureMode, "redis-failure-mode", "error", "when Redis fails: error (UNAVAILABLE; Envoy's failure_mode_deny decides) | allow | deny | local")
	fs.IntVar(&r.expectedReplicas, "expected-replicas", 1, "envoy-rls replicas sharing the limits; failure mode local divides each limit by it")
}

func newRedisBackend(ctx context.Context, cfg *serveConfig, log *zap.Logger, reg prometheus.Registerer) (rls.Backend, func(), error) {
	opts, err := redisalgo.ParseURL(cfg.redisURL)
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
	client, err := redisalgo.NewClient(opts)
	if err != nil {
		return nil, nil, err
	}
	// LazyLoad lets the service start while Redis is down; the failure mode
	// answers until it is back, and NOSCRIPT handling loads the script then.
	b, err := redisalgo.New(client, redisalgo.Options{Logger: log, LazyLoad: true})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	if err := b.LoadScript(ctx); err != nil {
		log.Warn("redis not reachable at start; will retry on each request", zap.Error(err))
	}
	return b, func() { client.Close() }, nil
}
