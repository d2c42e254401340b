// Package stack builds the rate-limit backend that envoy-rls serves from,
// in one place, so that the service, the tests and the benchmark driver
// run the same layers in the same order:
//
//	Redis:     failover (timeout, breaker per shard, failure mode)
//	             → lease (hot counters answered from leases, pkg/lease)
//	               → denycache (known denials answered in-process)
//	                 → redisalgo (Lua on Redis)
//	in-process: memstore
//
// With a per-second Redis (Config.PerSecondRedis) each Redis gets these
// layers of its own, and a split above them sends each check by its
// period (persecond.go). docs/architecture.md#layers says why this order.
//
// The deny cache sits inside the failure policy: outside it, the answers of
// the deny and local failure modes would be cached and outlive Redis's
// return. The lease layer sits inside the failure policy too, so a request
// whose Redis part fails gets the failure mode (its leased hits go back
// into the lease), while one answered wholly from a lease in hand is
// answered even during an outage; and outside the deny cache, so that
// leased hits cost not even a cache lookup and a take's denial is cached
// like any other. The stack also owns the readiness answer of its backend (Ready)
// and its lifecycle: Run runs its goroutines (the lease layers' sweepers,
// which return every lease held when Run ends, and the in-process stores'
// sweepers), and Close, after Run returned, releases the rest. The Redis
// backends' batchers are Close's, not Run's: they own no long-lived
// goroutine (a flusher runs only while Apply has queued calls), so there is
// nothing to run, only the pipelines in flight to wait for.
//
// stack must not parse flags, URLs or environment variables, build Redis
// clients, or know gRPC: it takes a client that is already built and
// options that are already validated by their owners.
package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/lease"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// Config selects and configures the layers. The zero value (with no
// Redis) is the embedded in-process store.
type Config struct {
	// Redis is the client of the shared store, a single-node (standalone or
	// Sentinel) or a cluster client; nil runs the in-process store alone.
	Redis *redisclient.Client
	// PerSecondRedis, when set with Redis, is a second Redis that holds the
	// limits whose period is at most a second (envoyproxy/ratelimit's
	// REDIS_PERSECOND): those are the hottest keys, and a Redis of their
	// own keeps them from slowing the longer limits. It gets layers of its
	// own (breaker, failure mode, deny cache); see perSecond for how a
	// request spanning both stays all or nothing.
	PerSecondRedis *redisclient.Client
	// Timeout bounds every Redis call (failover.Options.Timeout) and the
	// script load at start.
	Timeout time.Duration
	// FailureMode, ExpectedReplicas and Breaker configure pkg/failover.
	FailureMode      failover.Mode
	ExpectedReplicas int
	Breaker          failover.BreakerOptions
	// DenyCacheEntries sizes the deny cache; 0 turns it off.
	DenyCacheEntries int
	// MaxCallCost bounds one merged script call (redisalgo.Options).
	MaxCallCost int64
	// MemstoreMaxKeys bounds the in-process store, the embedded one or the
	// local failure mode's; 0 means no bound.
	MemstoreMaxKeys int
	Logger          *zap.Logger
	Registerer      prometheus.Registerer
	// KeyPrefix goes before every Redis key (redisalgo.Options.KeyPrefix).
	KeyPrefix string
	// CounterHashes is redisalgo.Options.CounterHashes.
	CounterHashes int
	// BatchLinger is redisalgo.Options.BatchLinger.
	BatchLinger time.Duration
	// Lease configures the lease layer (pkg/lease); a TTL of 0 leaves it
	// out. Its ReturnWait defaults to Timeout.
	Lease lease.Options
	// CallerTime makes Redis evaluate at each request's now instead of its
	// own TIME (redisalgo.Options.CallerTime). Only tests set it.
	CallerTime bool
}

// Stack is a built backend. Its Apply is the pkg/rls Backend contract.
type Stack struct {
	apply func(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error)
	peek  peekFunc
	ready func(ctx context.Context) error
	name  string
	// runs are the goroutines Run runs; close releases the rest after.
	runs  []func(context.Context) error
	close []func()
	// redis is Config.Redis, nil for the in-process store.
	redis *redisclient.Client
}

// New builds the stack cfg describes. With Redis it does not fail when
// Redis is unreachable: the failure mode answers until Redis is back, and
// the script is loaded then.
func New(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Redis == nil {
		store, err := newStore(cfg)
		if err != nil {
			return nil, fmt.Errorf("stack: in-process store: %w", err)
		}
		return &Stack{apply: store.Apply, peek: store.Peek, name: "memory", runs: []func(context.Context) error{store.Run}}, nil
	}
	return newRedis(ctx, cfg)
}

// Apply applies checks at now on the stack's backend.
func (s *Stack) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	return s.apply(ctx, now, checks)
}

// Peek reads the state of each check's counter at now without changing
// it, from the store that holds it (the in-process store, or the Redis of
// its period), past the failure policy, the lease layer and the deny
// cache: those decide requests, a peek only reads. Hits a replica holds in
// a lease are debited from the state already.
func (s *Stack) Peek(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Peeked, error) {
	return s.peek(ctx, now, checks)
}

// Ready reports whether the stack can decide, for readiness probes: the
// in-process store always can. With Redis, see readyUnder.
func (s *Stack) Ready(ctx context.Context) error {
	if s.ready == nil {
		return nil
	}
	return s.ready(ctx)
}

// Redis returns the client of the shared store (Config.Redis, not the
// per-second one), or nil when the stack is the in-process store: state
// beside the counters that replicas must share (warm-up anchors) lives
// there.
func (s *Stack) Redis() *redisclient.Client { return s.redis }

// Name is "memory" or "redis", for the start-up log line.
func (s *Stack) Name() string { return s.name }

// Run runs the stack's sweepers until ctx ends, then returns once all of
// them have: the lease layers' return every lease held as they end, so
// Apply must not be called after Run returned (stop serving first), and
// the Redis clients must stay open until it has. It returns the first
// error of a sweeper (none returns one today).
func (s *Stack) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, run := range s.runs {
		g.Go(func() error { return run(ctx) })
	}
	return g.Wait()
}

// Close releases what the stack holds besides Run's goroutines (the Redis
// backends' batchers, which wait for their pipelines in flight), in
// reverse order; call it after Run returned, or instead of Run. The Redis
// client stays the caller's to close.
func (s *Stack) Close() {
	for i := len(s.close) - 1; i >= 0; i-- {
		s.close[i]()
	}
}

// newStore returns an in-process store; Run runs its sweeper.
func newStore(cfg Config) (*memstore.Store, error) {
	return memstore.New(memstore.Options{MaxKeys: cfg.MemstoreMaxKeys, Registerer: cfg.Registerer})
}

// newRedis builds the Redis stack, and the per-second one beside it when
// cfg.PerSecondRedis is set.
func newRedis(ctx context.Context, cfg Config) (*Stack, error) {
	main, err := newRedisSide(ctx, cfg, cfg.Redis)
	if err != nil || cfg.PerSecondRedis == nil {
		return main, err
	}
	ps := cfg
	ps.Logger = cfg.Logger.Named("persecond")
	if cfg.Registerer != nil {
		// The same collectors again would clash with the main side's.
		ps.Registerer = prometheus.WrapRegistererWithPrefix(PerSecondMetricPrefix, cfg.Registerer)
	}
	sec, err := newRedisSide(ctx, ps, cfg.PerSecondRedis)
	if err != nil {
		main.Close()
		return nil, fmt.Errorf("per-second redis: %w", err)
	}
	return &Stack{
		apply: perSecond{main: main.apply, sec: sec.apply, log: cfg.Logger}.Apply,
		peek:  peekPerSecond(main.peek, sec.peek),
		ready: func(ctx context.Context) error {
			if err := main.ready(ctx); err != nil {
				return err
			}
			if err := sec.ready(ctx); err != nil {
				return fmt.Errorf("per-second redis: %w", err)
			}
			return nil
		},
		name:  "redis",
		runs:  append(main.runs, sec.runs...),
		close: append(main.close, sec.close...),
		redis: cfg.Redis,
	}, nil
}

// newRedisSide builds the layers over one Redis client.
func newRedisSide(ctx context.Context, cfg Config, client *redisclient.Client) (*Stack, error) {
	log := cfg.Logger
	opts := redisalgo.Options{
		Logger: log, LazyLoad: true, Registerer: cfg.Registerer, MaxCallCost: cfg.MaxCallCost, CallerTime: cfg.CallerTime,
		KeyPrefix: cfg.KeyPrefix, CounterHashes: cfg.CounterHashes, BatchLinger: cfg.BatchLinger,
	}
	b, err := RedisBackend(client, opts)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s := &Stack{name: "redis", peek: b.Peek, close: []func(){b.Close}, redis: client}
	lctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	if err := b.LoadScript(lctx); err != nil {
		log.Warn("redis not reachable at start; answering with the failure mode until it is",
			zap.String("mode", cfg.FailureMode.String()), zap.Error(err))
	}
	cancel()

	fo := failover.Options{
		Ping:             b.Ping,
		Mode:             cfg.FailureMode,
		ExpectedReplicas: cfg.ExpectedReplicas,
		Timeout:          cfg.Timeout,
		Breaker:          cfg.Breaker,
		// One breaker per Redis Cluster master (one in all for standalone
		// and Sentinel): a dead master's keys get the failure mode, the
		// others' keep being decided by Redis. redisalgo asks them once it
		// has built and routed a request's keys, so they are built once;
		// a request a lease or the deny cache answers asks none.
		Routed:     true,
		ShardName:  b.ShardName,
		Logger:     log,
		Registerer: cfg.Registerer,
	}
	if cfg.FailureMode == failover.ModeLocal {
		store, err := newStore(cfg)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("stack: local failure-mode store: %w", err)
		}
		fo.Local = store
		s.runs = append(s.runs, store.Run)
	}
	var primary failover.Limiter = b
	if cfg.DenyCacheEntries > 0 {
		dc, err := denycache.New(b, denycache.Options{MaxEntries: cfg.DenyCacheEntries, Registerer: cfg.Registerer})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("stack: %w", err)
		}
		primary = dc
	}
	if cfg.Lease.TTL > 0 {
		lo := cfg.Lease
		lo.Logger, lo.Registerer = log, cfg.Registerer
		if lo.ReturnWait == 0 {
			lo.ReturnWait = cfg.Timeout
		}
		ll, err := lease.New(primary, lo)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("stack: %w", err)
		}
		// Run ends before Close closes the Redis backend, so the leases
		// held go back at shutdown.
		s.runs = append(s.runs, ll.Run)
		primary = ll
	}
	fb, err := failover.New(primary, fo)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("stack: %w", err)
	}
	s.apply, s.ready = fb.Apply, readyUnder(fb, log)
	return s, nil
}

// RedisBackend returns the Redis backend for client: a cluster backend,
// which sends one script call per hash slot, for a cluster client, and a
// single-node one otherwise.
func RedisBackend(client *redisclient.Client, opts redisalgo.Options) (*redisalgo.Backend, error) {
	if client.Cluster != nil {
		return redisalgo.NewCluster(client.Cluster, opts)
	}
	return redisalgo.New(client.Single, opts)
}

// readyUnder is the readiness of a Redis stack under its failure mode.
//
// With the error mode, a Redis that is down (or open breakers) makes the
// replica unready: every request would get UNAVAILABLE anyway, and a load
// balancer may find a replica whose Redis works. With allow, deny or local
// the operator chose how to answer without Redis, and every replica shares
// the same Redis: failing readiness would pull all of them out of the
// Service and turn the chosen policy into connection errors, which Envoy
// then treats by its own failure_mode_deny. So those modes stay ready
// (but for a counter-hash count that differs from the deployment's, which
// is this replica's own fault and unready in every mode); the
// outage shows in envoy_rls_backend_breaker_state,
// envoy_rls_backend_errors_total, envoy_rls_backend_failure_mode_total and
// a warning logged at each readiness check.
func readyUnder(fb *failover.Backend, log *zap.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		err := fb.Ping(ctx)
		if err == nil {
			return nil
		}
		// A replica whose counter-hash count is not the deployment's
		// would count apart from the others: no outage, which a failure
		// mode answers, but a misconfiguration of this replica alone.
		if fb.Mode() == failover.ModeError || errors.Is(err, redisalgo.ErrCounterHashesMismatch) {
			return fmt.Errorf("backend: %w", err)
		}
		log.Warn("redis unavailable; staying ready and answering with the failure mode",
			zap.String("mode", fb.Mode().String()), zap.String("breaker", fb.State().String()), zap.Error(err))
		return nil
	}
}
