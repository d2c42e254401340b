package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/stack"
	"github.com/envoy-rls/envoy-rls/pkg/warmup"
)

// newWarmup returns the warm-up ramps' adjuster: anchored in the backend's
// Redis, under the deployment's key prefix, so that every replica ramps
// alike; in-process when the backend is the in-process store.
func newWarmup(ctx context.Context, backend *stack.Stack, keyPrefix string, log *zap.Logger) *warmup.Adjuster {
	opts := warmup.Options{Logger: log}
	if c := backend.Redis(); c != nil {
		opts.Anchors = warmup.NewRedisAnchors(c.Universal(), keyPrefix)
	}
	return warmup.New(ctx, opts)
}
