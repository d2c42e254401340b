package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

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

// topCmd prints a running server's top limited clients (/debug/top).
func topCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("top", stderr)
	addr := fs.String("addr", "127.0.0.1:6070", "the server's debug listener (--debug-addr), host:port")
	window := fs.String("window", "1m", "window: 1m, 10m (at most 10m)")
	n := fs.Int("n", 10, "values per list")
	watch := fs.Duration("watch", 0, "print again at this interval until interrupted (0: once)")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle to verify the debug listener's certificate (it serves TLS with --admin-tls-cert)")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, for a debug listener that asks for one (--admin-tls-client-ca)")
	tlsKey := fs.String("tls-key", "", "PEM private key for --tls-cert")
	if err := parseFlagsN(fs, args, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	base, hc, err := debugClient(*addr, *tlsCA, *tlsCert, *tlsKey)
	if err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	c := console.TopClient{Base: base, HTTP: hc}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := c.Fetch(ctx, *window, *n)
		cancel()
		if err == nil {
			err = console.WriteTop(stdout, page)
		}
		if err != nil {
			fmt.Fprintln(stderr, "envoy-rls top:", err)
			return 1
		}
		if *watch <= 0 {
			return 0
		}
		time.Sleep(*watch)
		fmt.Fprintln(stdout)
	}
}
