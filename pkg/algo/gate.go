package algo

import "context"

// ShardGate lets a layer above a sharded backend decide, per shard, whether
// a request may reach the backend's shards, at the moment the backend knows
// which shards those are. It works like net/http/httptrace's hooks: the
// layer that keeps per-shard state (pkg/failover's circuit breaker per Redis
// Cluster master) puts a gate in the request's context with WithShardGate,
// and the layer that routes the checks to shards (pkg/redisalgo, which
// builds each check's key once and maps it to its master then) asks it
// with ShardGateOf right before it sends anything. The layers in between
// (the lease layer, the deny cache) need not know about it: a request they
// answer without the backend never asks the gate, so no shard's state
// decides it.
//
// The routing layer asks at most once per Apply it receives the context in,
// with the distinct shards of that call's checks (0 for a backend with one
// shard), and from that Apply's goroutine, before anything is sent. When
// AllowShards returns an error, the backend sends nothing, consumes
// nothing, and returns an error that wraps it. Work that outlives the
// request or is not the request's own (a lease's return, a refund or a
// give-back that the backend sends for the same request) does not ask
// again: a gate is the request's, valid only until the Apply that put it in
// the context returns, and it is not safe for concurrent use.
//
// It is an interface rather than a func so that the gate layer can hand
// out a pooled per-request value without allocating a closure.
type ShardGate interface {
	// AllowShards reports whether a request whose checks go to shards may
	// be sent: nil, or why not. It must not keep shards, which the caller
	// reuses.
	AllowShards(shards []int) error
}

// shardGateKey is the context key of a ShardGate.
type shardGateKey struct{}

// WithShardGate returns ctx carrying g, in place of any gate ctx carried.
func WithShardGate(ctx context.Context, g ShardGate) context.Context {
	return context.WithValue(ctx, shardGateKey{}, g)
}

// ShardGateOf returns the gate ctx carries, or nil.
func ShardGateOf(ctx context.Context) ShardGate {
	g, _ := ctx.Value(shardGateKey{}).(ShardGate)
	return g
}
