package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

const serveLong = `Serve the rate-limit service: gRPC (envoy.service.ratelimit.v3.RateLimitService,
health, reflection) on --grpc-addr, and /healthz, /readyz, /metrics on
--http-addr, with the rules of --config-dir (watched; a bad edit keeps the
last good rules) or of an xDS server (--config-source=xds).

Without --redis-url the counters live in the process (one replica, or a
try-out); with it, in Redis: standalone, Sentinel or Cluster.

Each flag is also read from its ENVOY_RLS_* twin, and envoyproxy/ratelimit's
variables (REDIS_URL, RUNTIME_ROOT, ...) set the flags named beside them, so
a Deployment of envoyproxy/ratelimit runs unchanged; the command line wins
over the twin, the twin over the reference's variable.`

const serveExample = `  # the example rules on the in-process store
  envoy-rls serve --config-dir examples/config

  # counters in Redis, console logs
  envoy-rls serve --config-dir examples/config --redis-url redis://localhost:6379 --log-format console

  # the same from the environment
  ENVOY_RLS_CONFIG_DIR=examples/config ENVOY_RLS_REDIS_URL=redis://localhost:6379 envoy-rls serve`

// serveCommand is serve under the name use: "serve", or the root command,
// which serves when no command is named.
func (c *cli) serveCommand(use string) *cobra.Command {
	cfg, fs := serveconfig.New("serve")
	cmd := &cobra.Command{
		Use:     use,
		Short:   "run the rate-limit service (the default command)",
		Long:    serveLong,
		Example: serveExample,
		Args:    maxArgs(0),
		RunE:    c.body(func([]string) int { return c.serve(cfg, fs) }),
	}
	addFlags(cmd, fs, true)
	return cmd
}

// serve serves with the flags cobra parsed into cfg and fs, until a
// signal. Exit codes: 0 stopped by a signal, 1 failed, 2 a wrong flag.
func (c *cli) serve(cfg *serveconfig.Settings, fs *flag.FlagSet) int {
	if err := cfg.Finish(fs, c.env); err != nil {
		fmt.Fprintf(c.stderr, "envoy-rls serve: %v\n", err)
		return 2
	}
	log, err := cfg.Logger()
	if err != nil {
		fmt.Fprintf(c.stderr, "envoy-rls serve: %v\n", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	c.redisLog.use(log.Named("redis"))
	cfg.LogEnv(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := c.runServer(ctx, cfg, log); err != nil {
		// One line either way: the error says what is wrong and where.
		var se startError
		if errors.As(err, &se) {
			printStartError(c.stderr, se.err)
			return 1
		}
		log.Error("envoy-rls stopped", zap.Error(err))
		return 1
	}
	return 0
}

// startError is a failure before the server began serving: a bad flag,
// rule directory or address. Nothing was served, so nothing was "kept".
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

// runServer turns the checked flags into app.Config and runs the app
// until ctx ends. An error before serving began is a startError.
func (c *cli) runServer(ctx context.Context, cfg *serveconfig.Settings, log *zap.Logger) error {
	if err := cfg.CheckRuleDir(); err != nil {
		return startError{err}
	}
	ac, err := cfg.AppConfig(log, c.version)
	if err != nil {
		return startError{err}
	}
	a, err := app.New(ctx, ac)
	if err != nil {
		return startError{err}
	}
	return a.Run(ctx)
}

// printStartError writes why serve could not start, one plain line per
// problem (a rules directory can have several), with no log framing or
// stack: the reader is a person at a terminal or in kubectl logs.
func printStartError(w io.Writer, err error) {
	for _, line := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		fmt.Fprintf(w, "envoy-rls serve: cannot start: %s\n", line)
	}
}
