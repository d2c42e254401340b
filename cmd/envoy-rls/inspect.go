package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/pkg/inspect"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// inspectTimeout is inspect's default --redis-timeout: serve's is tuned for
// requests that Envoy waits on, an operator's SCAN may take longer.
const inspectTimeout = 5 * time.Second

// inspectCommand reports what envoy-rls keeps in Redis, read-only (see
// pkg/inspect). It takes serve's Redis flags, so a Deployment's
// ENVOY_RLS_* (or envoyproxy/ratelimit's) environment finds the same
// Redis. Exit codes: 0 done, 1 Redis failed, 2 bad usage.
func (c *cli) inspectCommand() *cobra.Command {
	cfg, fs := serveFlagSet("inspect")
	cfg.redis.timeout = inspectTimeout
	fs.Lookup("redis-timeout").DefValue = inspectTimeout.String()
	var opts inspect.Options
	var asJSON bool
	fs.IntVar(&opts.Top, "top", 10, "how many keys the largest and most-used lists show; most used is by OBJECT FREQ under an LFU maxmemory-policy, else by counter value")
	fs.IntVar(&opts.MaxKeys, "max-keys", 0, "stop after scanning this many keys in all, each field of a fixed window's hash counting as one (0: no bound); the report then says it is partial")
	fs.Int64Var(&opts.Count, "scan-count", 100, "COUNT of each SCAN and HSCAN step: the most work one step asks of Redis")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd := &cobra.Command{
		Use:   "inspect --redis-url URL",
		Short: "what is in Redis: envoy-rls's keys decoded and summarised, read-only",
		Long: `Report what envoy-rls keeps in Redis, read-only (SCAN, HSCAN, MEMORY USAGE, OBJECT FREQ):
its keys, and the fields of its fixed windows' hashes, decoded and counted
per domain and algorithm, the largest and the most used. With --config-dir,
each key is matched to its rule. --redis-counter-hashes must be the
deployment's.

inspect takes serve's flags and environment, so a Deployment's settings find
the same Redis; the Redis flags listed here matter.
Exit codes: 0 done, 1 Redis failed, 2 bad usage.`,
		Example: `  envoy-rls inspect --redis-url redis://localhost:6379

  # match keys to the shipped example rules, as JSON
  envoy-rls inspect --redis-url redis://localhost:6379 --config-dir examples/config --json`,
		Args: maxArgs(0),
		RunE: c.body(func([]string) int { return inspectParsed(c.env, cfg, fs, &opts, asJSON, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "redis-url", "redis-key-prefix", "redis-counter-hashes", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-timeout",
		"config-dir", "top", "max-keys", "scan-count", "json")
	return cmd
}

// inspectParsed inspects with the flags cobra parsed into cfg and opts.
func inspectParsed(env environment, cfg *serveConfig, fs *flag.FlagSet, opts *inspect.Options, asJSON bool, stdout, stderr io.Writer) int {
	// The Redis and rules are found as serve finds them (serveConfig.finish).
	if err := cfg.finish(fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	if err := checkInspect(cfg, fs, opts); err != nil {
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	copts, err := cfg.redis.clientOptions("--redis-url", cfg.redisURL)
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
	if opts.CounterHashes, err = deploymentCounterHashes(context.Background(), client, cfg, fs); err != nil {
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
	return printReport(stdout, stderr, "inspect", asJSON, rep, func(w io.Writer) error { return inspect.WriteText(w, rep) })
}

// checkInspect checks inspect's flags and loads the rules when
// --config-dir is given (on the command line or in the environment; its
// default is serve's and not a request to match rules).
func checkInspect(cfg *serveConfig, fs *flag.FlagSet, opts *inspect.Options) error {
	switch {
	case cfg.redisURL == "":
		return errors.New("--redis-url: required")
	case opts.Top < 1:
		return fmt.Errorf("--top: %d must be at least 1", opts.Top)
	case opts.MaxKeys < 0:
		return fmt.Errorf("--max-keys: %d must be 0 (no bound) or positive", opts.MaxKeys)
	case opts.Count < 1:
		return fmt.Errorf("--scan-count: %d must be at least 1", opts.Count)
	}
	if err := positive("--redis-timeout", cfg.redis.timeout); err != nil {
		return err
	}
	if err := redisalgo.ValidateKeyPrefix(cfg.redis.keyPrefix); err != nil {
		return fmt.Errorf("--redis-key-prefix: %w", err)
	}
	opts.KeyPrefix = cfg.redis.keyPrefix
	// A fixed window's counter is ours only in the bucket the
	// deployment's count puts it in, so inspect needs the same count:
	// the recorded one (deploymentCounterHashes), which the flag, checked
	// here, must agree with.
	if err := counterHashesError(cfg.redis.counterHashes); err != nil {
		return err
	}
	if !flagGiven(fs, "config-dir") {
		return nil
	}
	ro, err := cfg.rulesOptions()
	if err != nil {
		return err
	}
	loader := rules.NewLoader(cfg.configDir, ro)
	if err := loader.Load(); err != nil {
		return fmt.Errorf("--config-dir: %w", err)
	}
	opts.Rules = loader.Current()
	return nil
}

// flagGiven reports whether the flag name was set on the command line or
// through its environment twin.
func flagGiven(fs *flag.FlagSet, name string) bool {
	_, env := os.LookupEnv(envName(name))
	return fs.Changed(name) || env
}
