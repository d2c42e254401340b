package cli

import (
	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

// explainCommand is `envoy-rls explain` (internal/clients' Explain): why
// a request would be limited, offline from the rules or live from a
// running server's debug listener.
func (c *cli) explainCommand() *cobra.Command {
	cfg, fs := serveconfig.New("explain")
	ef := clients.NewExplain(cfg, fs)
	cmd := &cobra.Command{
		Use:   "explain --domain D -d key=value[,key=value…] [-d …]",
		Short: "why a request is limited: the matched rule, its limits, Redis keys and (live) counters",
		Long: `Explain why a request would be limited: the rule each descriptor matches,
its limits, the Redis keys of its counters, and, live (--addr, a running
server's --debug-addr), each counter's state. Nothing is consumed.

Offline, the rules are read as serve reads them: explain takes serve's
flags and environment; the rule and key flags listed here matter. With
--redis-url, the keys are named with the counter-hash count the
deployment recorded in Redis (--redis-counter-hashes, if given, must
agree with it).
Exit codes: 0 explained, 1 the server refused or failed, 2 bad usage.`,
		Example: `  # offline, against the shipped example rules
  envoy-rls explain --config-dir examples/config --domain edge -d remote_address=203.0.113.7

  # live, with each counter's state, from a server started with --debug-addr 127.0.0.1:6070
  envoy-rls explain --addr 127.0.0.1:6070 --domain edge -d remote_address=203.0.113.7 --json`,
		Args: maxArgs(0),
		RunE: c.body(func([]string) int { return ef.Run(fs, c.env, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "addr", "tls-ca", "tls-cert", "tls-key", "domain", "descriptor", "json", "timeout", "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "redis-url", "redis-key-prefix", "redis-counter-hashes")
	return cmd
}
