package cli

import (
	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
)

const validateExample = `  # the shipped example rules
  envoy-rls validate examples/config

  # one file
  envoy-rls validate examples/config/edge.yaml

  # as a Deployment would load them: its flags, and its environment
  envoy-rls validate --config-dir examples/config --default-algorithm fixed_window
  ENVOY_RLS_CONFIG_DIR=examples/config envoy-rls validate`

// validateCommand is `envoy-rls validate` (internal/clients' Validate).
func (c *cli) validateCommand() *cobra.Command {
	cfg, fs := serveconfig.New("validate")
	cmd := &cobra.Command{
		Use:   "validate [DIR|FILE]",
		Short: "check a rules directory (or one rule file) as serve would load it, listing every problem",
		Long: `Check a rules directory, or one rule file, the way serve would load it and
list every problem, one line each with its file and line, so that CI can
run it. Exit codes: 0 valid, 1 the rules have problems, 2 a wrong flag or
a path that is not there.

DIR defaults to --config-dir (or envoyproxy/ratelimit's RUNTIME_* directory).
validate takes every flag serve takes, so a Deployment's command line and
environment validate as they serve; the rule flags listed here matter.`,
		Example: validateExample,
		Args:    maxArgs(1),
		RunE:    c.body(func(args []string) int { return clients.Validate(cfg, fs, c.env, args, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "drop-in", "max-delay")
	return cmd
}
