package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
)

// overrideCommand is `envoy-rls override set|list|clear`: the admin API's
// client (internal/clients' Override).
func (c *cli) overrideCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "override set|list|clear",
		Short: "set, list or clear runtime limit overrides on running servers",
		Long: `Set, list or clear runtime limit overrides through the admin API of a running
envoy-rls (its --debug-addr, with --admin-token-file set): an override scales
or replaces one limit on every replica for a while, then expires by itself.
Common flags: --addr HOST:PORT (the server's --debug-addr), --token-file F;
for a TLS admin listener --tls-ca CA, and for mTLS --tls-cert C --tls-key K.`,
		Example: `  envoy-rls override set --domain edge --limit per_user --factor 0.5 --ttl 15m --reason "incident 42" --token-file token
  envoy-rls override list --token-file token
  envoy-rls override clear --domain edge --limit per_user --reason "incident 42 over" --token-file token`,
		// A subcommand's flags after a misspelt subcommand are not the
		// mistake to report.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown subcommand %q (want set, list or clear)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(c.stderr, cmd.UsageString())
			c.code = 2
			return nil
		},
	}
	for _, sub := range []struct{ name, short, example string }{
		{"set", "scale (--factor) or replace (--requests-per-unit) one limit for --ttl",
			`  envoy-rls override set --domain edge --limit per_user --factor 0.5 --ttl 15m --reason "incident 42" --token-file token`},
		{"list", "list the overrides in force", "  envoy-rls override list --token-file token --json"},
		{"clear", "clear overrides before they expire",
			`  envoy-rls override clear --domain edge --limit per_user --reason "over" --token-file token
  envoy-rls override clear --all --reason "all over" --token-file token`},
	} {
		a, fs := clients.NewOverride(sub.name)
		sc := &cobra.Command{Use: sub.name, Short: sub.short, Example: sub.example, Args: maxArgs(0),
			RunE: c.body(func([]string) int { return a.Run(fs, c.env, c.stdout, c.stderr) })}
		addFlags(sc, fs, false)
		cmd.AddCommand(sc)
	}
	return cmd
}
