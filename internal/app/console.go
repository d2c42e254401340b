package app

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/admin"
	"github.com/envoy-rls/envoy-rls/pkg/console"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// ConsoleConfig configures the console on the debug listener; it and its
// top-clients sketch exist only when the debug listener does.
type ConsoleConfig struct {
	// Off leaves the console and its sketch out.
	Off bool
	// Replica names this replica on the page (its pod name); empty shows
	// the debug listener's address.
	Replica string
	// HashValues shows descriptor values hashed (topk.Options.Hash).
	HashValues bool
}

// consoleParts are the console's live state: the sketch the service
// feeds, the sampled decision rates and the rule source's state.
type consoleParts struct {
	top    *topk.Set
	rates  *console.Rates
	source *sourceState
}

// newConsole builds the console's state when the debug listener is on and
// the console not turned off; nil otherwise (the service then feeds no
// sketch).
func newConsole(cfg Config) (*consoleParts, error) {
	if cfg.Servers.DebugAddr == "" || cfg.Console.Off {
		return nil, nil
	}
	top, err := topk.New(topk.Options{Hash: cfg.Console.HashValues})
	if err != nil {
		return nil, err
	}
	src := &sourceState{st: console.SourceState{Kind: "file", Name: cfg.Rules.Dir}}
	if cfg.Rules.XDS != nil {
		src.st = console.SourceState{Kind: "xds", Name: cfg.Rules.XDS.Server}
	}
	return &consoleParts{top: top, source: src}, nil
}

// sampleRates starts sampling the service's decision counters.
func (c *consoleParts) sampleRates(m *rls.Metrics) func(context.Context) error {
	c.rates = console.NewRates(func() []console.Count {
		ds := m.Decisions()
		out := make([]console.Count, len(ds))
		for i, d := range ds {
			out[i] = console.Count{Key: topk.Key{Domain: d.Domain, Rule: d.Rule, Limit: d.Limit}, Code: d.Code, Total: d.Total}
		}
		return out
	}, nil)
	return c.rates.Run
}

// sourceState follows the rule source's loads for the console.
type sourceState struct {
	mu sync.Mutex
	st console.SourceState
}

// observe is a reload observer (rules.Options.OnReload).
func (s *sourceState) observe(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Loads++
	if err != nil {
		s.st.Errors++
		s.st.LastError, s.st.LastErrorAt = err.Error(), time.Now()
		return
	}
	s.st.LastGood = time.Now()
}

func (s *sourceState) get() console.SourceState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// consoleHandler is the console on the debug listener.
func (a *App) consoleHandler(cfg Config, debug admin.DebugOptions) http.Handler {
	store, topology := "memory", "in-process"
	var ping func(context.Context) []console.Shard
	if c := a.backend.stack.Redis(); c != nil {
		store, topology, ping = "redis", string(redisMode(cfg.Backend.Redis)), pingShards(c)
	}
	return console.Handler(console.Options{
		Replica: cfg.Console.Replica,
		Top:     a.console.top,
		Rates:   a.console.rates,
		Config:  debug.Config,
		Source:  a.console.source.get,
		Health:  console.NewHealth(console.HealthOptions{Store: store, Topology: topology, Gatherer: a.reg, Ping: ping}),
		Explain: debug.Explain,
		Admin:   admin.RequireToken(debug.AdminTokenFile, debug.Admin),
	})
}

func redisMode(o *redisclient.Options) redisclient.Mode {
	if o == nil {
		return ""
	}
	return o.Mode
}

// pingShards measures each master's round trip: every Cluster master, or
// the one master of a standalone or Sentinel client.
func pingShards(c *redisclient.Client) func(context.Context) []console.Shard {
	one := func(ctx context.Context, cl *redis.Client) console.Shard {
		start := time.Now()
		err := cl.Ping(ctx).Err()
		s := console.Shard{Addr: cl.Options().Addr, RTTMS: float64(time.Since(start).Microseconds()) / 1000}
		if err != nil {
			s.Error = err.Error()
		}
		return s
	}
	return func(ctx context.Context) []console.Shard {
		if c.Cluster == nil {
			return []console.Shard{one(ctx, c.Single)}
		}
		var mu sync.Mutex
		var out []console.Shard
		err := c.Cluster.ForEachMaster(ctx, func(ctx context.Context, cl *redis.Client) error {
			s := one(ctx, cl)
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
			return nil
		})
		slices.SortFunc(out, func(a, b console.Shard) int { return strings.Compare(a.Addr, b.Addr) })
		if err != nil && !errors.Is(err, context.Canceled) {
			out = append(out, console.Shard{Addr: strings.Join(c.Cluster.Options().Addrs, ","), Error: err.Error()})
		}
		return out
	}
}
