package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/inspect"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// inspectTimeout is inspect's default --redis-timeout: serve's is tuned for
// requests that Envoy waits on, an operator's SCAN may take longer.
const inspectTimeout = 5 * time.Second

// inspectCmd reports what envoy-rls keeps in Redis, read-only (see
// pkg/inspect). It takes serve's Redis flags, so a Deployment's
// ENVOY_RLS_* (or envoyproxy/ratelimit's) environment finds the same
// Redis. Exit codes: 0 done, 1
// Redis failed, 2 bad usage.
func inspectCmd(env environment, args []string, stdout, stderr io.Writer) int {
	cfg, fs := serveFlagSet("inspect", stderr)
	cfg.redis.timeout = inspectTimeout
	fs.Lookup("redis-timeout").DefValue = inspectTimeout.String()
	var opts inspect.Options
	var asJSON bool
	fs.IntVar(&opts.Top, "top", 10, "how many keys the largest and most-used lists show; most used is by OBJECT FREQ under an LFU maxmemory-policy, else by counter value")
	fs.IntVar(&opts.MaxKeys, "max-keys", 0, "stop after scanning this many keys in all (0: no bound); the report then says it is partial")
	fs.Int64Var(&opts.Count, "scan-count", 100, "COUNT of each SCAN step: the most work one step asks of Redis")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls inspect --redis-url URL [--config-dir DIR] [--top N] [--max-keys N] [--json]\n\nflags (each also read from %s<NAME>):\n", envPrefix)
		printFlags(fs, "redis-url", "redis-key-prefix", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-timeout",
			"config-dir", "top", "max-keys", "scan-count", "json")
	}
	// The Redis and rules are found as serve finds them (serveConfig.parse).
	if err := cfg.parse(fs, args, 0, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls inspect: %v\n", err)
		return 2
	}
	if err := checkInspect(cfg, fs, &opts); err != nil {
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
	var masters inspect.Masters = inspect.Single{Client: client.Single}
	if client.Cluster != nil {
		masters = client.Cluster
	}
	rep, err := inspect.Run(context.Background(), masters, opts)
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
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
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
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	_, env := os.LookupEnv(envName(name))
	return given || env
}

// printFlags writes the usage of the named flags of fs, for commands that
// share serve's flag set but use only some of it.
func printFlags(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		fmt.Fprintf(fs.Output(), "  --%s (default %q, env %s)\n    \t%s\n", f.Name, f.DefValue, envName(f.Name), f.Usage)
	}
}
