package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/inspect"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// inspectTimeout is inspect's default --redis-timeout: serve's is tuned for
// requests that Envoy waits on, an operator's SCAN may take longer.
const inspectTimeout = 5 * time.Second

// Inspect is `envoy-rls inspect`: what envoy-rls keeps in Redis, read
// only (see pkg/inspect). It takes serve's Redis flags, so a Deployment's
// ENVOY_RLS_* (or envoyproxy/ratelimit's) environment finds the same
// Redis; its fields are its own flags.
type Inspect struct {
	cfg    *serveconfig.Settings
	opts   inspect.Options
	asJSON bool
}

// NewInspect defines inspect's own flags on fs, which holds serve's flags
// (serveconfig.New) parsed into cfg, and gives --redis-timeout inspect's
// default.
func NewInspect(cfg *serveconfig.Settings, fs *flag.FlagSet) *Inspect {
	if f := fs.Lookup("redis-timeout"); f != nil {
		// A duration's own String: Set cannot refuse it.
		_ = f.Value.Set(inspectTimeout.String())
		f.DefValue = inspectTimeout.String()
	}
	in := &Inspect{cfg: cfg}
	fs.IntVar(&in.opts.Top, "top", 10, "how many keys the largest and most-used lists show; most used is by OBJECT FREQ under an LFU maxmemory-policy, else by counter value")
	fs.IntVar(&in.opts.MaxKeys, "max-keys", 0, "stop after scanning this many keys in all, each field of a fixed window's hash counting as one (0: no bound); the report then says it is partial")
	fs.Int64Var(&in.opts.Count, "scan-count", 100, "COUNT of each SCAN and HSCAN step: the most work one step asks of Redis")
	fs.BoolVar(&in.asJSON, "json", false, "print the report as JSON")
	return in
}

// Run inspects with the flags cobra parsed into fs. Exit codes: 0 done, 1
// Redis failed, 2 bad usage.
func (in *Inspect) Run(fs *flag.FlagSet, env flagenv.Env, stdout, stderr io.Writer) int {
	cfg, opts := in.cfg, &in.opts
	// The Redis and rules are found as serve finds them (Settings.Finish).
	if err := cfg.Finish(fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	keys, err := checkInspect(cfg, fs, env, opts)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	copts, err := cfg.RedisOptions()
	var client *redisclient.Client
	if err == nil {
		client, err = redisclient.New(copts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	defer client.Close()
	// The count the deployment's replicas recorded, not only the flag:
	// keys are ours only in the bucket the deployment's count puts them.
	if opts.CounterHashes, err = deploymentCounterHashes(context.Background(), client, keys, fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		if errors.Is(err, redisalgo.ErrCounterHashesMismatch) {
			return 2
		}
		return 1
	}
	var masters inspect.Masters = inspect.Single{Client: client.Single}
	if client.Cluster != nil {
		masters = client.Cluster
	}
	rep, err := inspect.Run(context.Background(), masters, *opts)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 1
	}
	return printReport(stdout, stderr, "inspect", in.asJSON, rep, func(w io.Writer) error { return inspect.WriteText(w, rep) })
}

// checkInspect checks inspect's flags, returns the counter keys they name,
// and loads the rules when --config-dir is given (on the command line or
// in the environment; its default is serve's and not a request to match
// rules).
func checkInspect(cfg *serveconfig.Settings, fs *flag.FlagSet, env flagenv.Env, opts *inspect.Options) (serveconfig.CounterKeys, error) {
	var keys serveconfig.CounterKeys
	switch {
	case cfg.RedisURL() == "":
		return keys, errors.New("--redis-url: required")
	case opts.Top < 1:
		return keys, fmt.Errorf("--top: %d must be at least 1", opts.Top)
	case opts.MaxKeys < 0:
		return keys, fmt.Errorf("--max-keys: %d must be 0 (no bound) or positive", opts.MaxKeys)
	case opts.Count < 1:
		return keys, fmt.Errorf("--scan-count: %d must be at least 1", opts.Count)
	}
	if err := flagenv.Positive("--redis-timeout", cfg.RedisTimeout()); err != nil {
		return keys, err
	}
	// A fixed window's counter is ours only in the bucket the
	// deployment's count puts it in, so inspect needs the same count:
	// the recorded one (deploymentCounterHashes), which the flag, checked
	// here, must agree with.
	keys, err := cfg.CounterKeys()
	if err != nil {
		return keys, err
	}
	opts.KeyPrefix = keys.Prefix
	if !flagenv.Given(fs, env.Lookup, "config-dir") {
		return keys, nil
	}
	ro, err := cfg.RulesOptions()
	if err != nil {
		return keys, err
	}
	loader := rules.NewLoader(cfg.ConfigDir(), ro)
	if err := loader.Load(); err != nil {
		return keys, fmt.Errorf("--config-dir: %w", err)
	}
	opts.Rules = loader.Current()
	return keys, nil
}
