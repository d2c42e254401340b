package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/pkg/console"
)

// consoleFlags configure the console on the debug listener (serve).
type consoleFlags struct {
	enabled    bool
	replica    string
	hashValues bool
}

func (c *consoleFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "console", true, "serve the live console (/console/ and /debug/top on --debug-addr) and feed its top-clients sketch on the request path; false turns both off")
	fs.StringVar(&c.replica, "console-replica", "", "name of this replica on the console (/console on --debug-addr); empty: $POD_NAME, else the host name (a pod's name in Kubernetes)")
	fs.BoolVar(&c.hashValues, "console-hash-values", false, "show descriptor values on the console's top clients (and /debug/top) as keyed SHA-256 hashes, never raw: for values that are personal data (IP addresses, user ids)")
}

func (c *consoleFlags) config() app.ConsoleConfig {
	replica := c.replica
	if replica == "" {
		replica = os.Getenv("POD_NAME")
	}
	if replica == "" {
		replica, _ = os.Hostname()
	}
	return app.ConsoleConfig{Off: !c.enabled, Replica: replica, HashValues: c.hashValues}
}

// topFlags are the flags of `envoy-rls top`.
type topFlags struct {
	addr, window           string
	n                      int
	watch                  time.Duration
	tlsCA, tlsCert, tlsKey string
}

// topCommand prints a running server's top limited clients (/debug/top).
func (c *cli) topCommand() *cobra.Command {
	var f topFlags
	fs := newFlagSet("top")
	fs.StringVar(&f.addr, "addr", defaultDebugAddr, "the server's debug listener (--debug-addr), host:port")
	fs.StringVar(&f.window, "window", "1m", "window: 1m, 10m (at most 10m)")
	fs.IntVar(&f.n, "n", 10, "values per list")
	fs.DurationVar(&f.watch, "watch", 0, "print again at this interval until interrupted (0: once)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA bundle to verify the debug listener's certificate (it serves TLS with --admin-tls-cert)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate, for a debug listener that asks for one (--admin-tls-client-ca)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
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
		RunE: c.body(func([]string) int { return topParsed(fs, &f, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, false)
	return cmd
}

// validate checks the flags the server would refuse, and --watch.
func (f *topFlags) validate() error {
	if d, err := time.ParseDuration(f.window); err != nil || d <= 0 {
		return fmt.Errorf("--window: %q (want a duration above 0 such as 1m or 10m)", f.window)
	}
	if f.n < 1 || f.n > 1000 {
		return fmt.Errorf("--n: %d (want 1 to 1000)", f.n)
	}
	if f.watch < 0 {
		return fmt.Errorf("--watch: %v (want 0 for once, or an interval)", f.watch)
	}
	return nil
}

// topParsed fetches and prints /debug/top, once or every f.watch.
func topParsed(fs *flag.FlagSet, f *topFlags, stdout, stderr io.Writer) int {
	if err := applyTwins(fs); err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	// A wrong flag is a wrong command line (exit 2), found before the
	// server is asked; the server still bounds the window by its sketch.
	if err := f.validate(); err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	base, hc, err := debugClient(f.addr, f.tlsCA, f.tlsCert, f.tlsKey)
	if err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	c := console.TopClient{Base: base, HTTP: hc}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := c.Fetch(ctx, f.window, f.n)
		cancel()
		if err == nil {
			err = console.WriteTop(stdout, page)
		}
		if err != nil {
			fmt.Fprintln(stderr, "envoy-rls top:", err)
			return 1
		}
		if f.watch <= 0 {
			return 0
		}
		time.Sleep(f.watch)
		fmt.Fprintln(stdout)
	}
}
