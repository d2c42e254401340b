package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/adaptive"
	"github.com/envoy-rls/envoy-rls/pkg/override"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
	"github.com/envoy-rls/envoy-rls/pkg/warmup"
)

// backend is the state the service decides on: the backend stack, and
// beside it in the same Redis (or in-process) the runtime overrides and
// the warm-up anchors, whose key names come from redisalgo like the
// counters' so that one --redis-key-prefix keeps deployments apart.
type backend struct {
	stack     *stack.Stack
	overrides *override.Table
	warmup    *warmup.Adjuster
	clients   []*redisclient.Client
	// redis is the main Redis client, nil on the in-process store.
	redis *redisclient.Client
	runs  []func(context.Context) error
}

// newBackend builds the Redis clients, the stack over them, the override
// table (and adaptive controllers) and the warm-up adjuster.
func newBackend(ctx context.Context, cfg BackendConfig, ov OverridesConfig, log *zap.Logger, reg prometheus.Registerer) (b *backend, err error) {
	b = &backend{}
	defer func() {
		if err != nil {
			b.close()
			b = nil
		}
	}()
	sc := cfg.Stack
	sc.Logger, sc.Registerer = log, reg
	if sc.Redis, err = b.client(cfg.Redis); err != nil {
		return b, err
	}
	b.redis = sc.Redis
	if sc.PerSecondRedis, err = b.client(cfg.PerSecondRedis); err != nil {
		return b, err
	}
	if b.stack, err = stack.New(ctx, sc); err != nil {
		return b, err
	}
	var store override.Store = &override.MemStore{}
	wopts := warmup.Options{Logger: log}
	if sc.Redis != nil {
		store = override.NewRedisStore(sc.Redis.Universal(), redisalgo.OverrideKey(sc.KeyPrefix), ov.MaxTTL)
		wopts.Anchors = warmup.NewRedisAnchors(sc.Redis.Universal(), sc.KeyPrefix)
	}
	b.warmup = warmup.New(wopts)
	if b.overrides, err = override.New(override.Config{Store: store, Refresh: ov.Refresh, MaxTTL: ov.MaxTTL, Logger: log, Registerer: reg}); err != nil {
		return b, err
	}
	b.runs = append(b.runs, b.warmup.Run, b.overrides.Run)
	if ov.AdaptiveFile != "" {
		ctl, err := adaptive.Load(ov.AdaptiveFile, adaptive.Options{Prometheus: ov.PrometheusURL, Table: b.overrides, Logger: log, Registerer: reg})
		if err != nil {
			return b, err
		}
		b.runs = append(b.runs, ctl.Run)
	}
	return b, nil
}

// client builds the client opts describe, or nil for nil opts, and keeps
// it to close.
func (b *backend) client(opts *redisclient.Options) (*redisclient.Client, error) {
	if opts == nil {
		return nil, nil
	}
	c, err := redisclient.New(opts)
	if err != nil {
		return nil, err
	}
	b.clients = append(b.clients, c)
	return c, nil
}

// close releases the stack (after its Run returned, or instead of it),
// then closes the clients it used.
func (b *backend) close() {
	if b.stack != nil {
		b.stack.Close()
	}
	for _, c := range b.clients {
		c.Close()
	}
}
