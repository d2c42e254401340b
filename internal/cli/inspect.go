package cli

import (
	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

// inspectCommand is `envoy-rls inspect` (internal/clients' Inspect): what
// envoy-rls keeps in Redis, read-only.
func (c *cli) inspectCommand() *cobra.Command {
	cfg, fs := serveconfig.New("inspect")
	in := clients.NewInspect(cfg, fs)
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
		RunE: c.body(func([]string) int { return in.Run(fs, c.env, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "redis-url", "redis-key-prefix", "redis-counter-hashes", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-timeout",
		"config-dir", "top", "max-keys", "scan-count", "json")
	return cmd
}
