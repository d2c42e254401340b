package cli

import (
	"github.com/spf13/cobra"

	"github.com/envoy-rls/envoy-rls/internal/clients"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// topCommand is `envoy-rls top` (internal/clients' Top): a running
// server's top limited clients (/debug/top).
func (c *cli) topCommand() *cobra.Command {
	var f clients.Top
	fs := flagenv.NewFlagSet("top")
	f.Register(fs)
	cmd := &cobra.Command{
		Use:   "top [--addr HOST:PORT] [--window 1m|10m]",
		Short: "the clients each limit denies most, from a running server's console sketch",
		Long: `Print the descriptor values each limit denies (and sees) most, from a running
envoy-rls's debug listener (/debug/top, the console's bounded sketch). Each
replica keeps its own: point --addr at each one (kubectl port-forward pod/NAME
6070) to see them all.`,
		Example: `  # the last minute's top values of a replica reached by port-forward
  kubectl -n istio-system port-forward deploy/envoy-rls 6070 &
  envoy-rls top --addr 127.0.0.1:6070

  # the last 10 minutes, 5 values a list, refreshed every 2s
  envoy-rls top --window 10m --n 5 --watch 2s`,
		Args: maxArgs(0),
		RunE: c.body(func([]string) int { return f.Run(fs, c.env, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, false)
	return cmd
}
