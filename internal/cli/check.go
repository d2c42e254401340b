package cli

import (
	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// checkCommand is `envoy-rls check` (internal/clients' Check).
func (c *cli) checkCommand() *cobra.Command {
	var f clients.Check
	fs := flagenv.NewFlagSet("check")
	f.Register(fs)
	cmd := &cobra.Command{
		Use:   "check --domain D -d key=value[,key=value…] [-d …]",
		Short: "ask a running service for a decision, as Envoy would",
		Long: `Ask a running envoy-rls for one decision, as Envoy's rate_limit filter would,
and print it per descriptor. Each call consumes hits like Envoy's.
When no limit applies to any descriptor (a typo in the domain, or
descriptors no rule matches), a note on stderr says so.
Exit codes: 0 OK, 1 OVER_LIMIT, 2 error, 3 no limit applies (with
--require-limit).`,
		Example: `  # one request of a client IP to the example rules' "edge" domain
  envoy-rls check --addr localhost:8081 --domain edge -d remote_address=203.0.113.7

  # a token budget: check it, then charge 800 tokens, then give 100 back
  envoy-rls check --domain edge -d user_id=alice --check-only
  envoy-rls check --domain edge -d user_id=alice --hits 800
  envoy-rls check --domain edge -d user_id=alice --hits 100 --refund

  # two descriptors in one request
  envoy-rls check --domain edge -d remote_address=203.0.113.7 -d user_id=alice`,
		Args: maxArgs(0),
		RunE: c.body(func([]string) int { return f.Run(fs, c.env, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, false)
	return cmd
}
