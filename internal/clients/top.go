package clients

import (
	"context"
	"fmt"
	"io"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/console"
)

// Top is `envoy-rls top`: a running server's top limited clients
// (/debug/top, the console's sketch). Its fields are its flags.
type Top struct {
	addr, window string
	n            int
	watch        time.Duration
	tls          TLSFiles
}

// Register defines top's flags on fs.
func (f *Top) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", serveconfig.DefaultDebugAddr, "the server's debug listener (--debug-addr), host:port")
	fs.StringVar(&f.window, "window", "1m", "window: 1m, 10m (at most 10m)")
	fs.IntVar(&f.n, "n", 10, "values per list")
	fs.DurationVar(&f.watch, "watch", 0, "print again at this interval until interrupted (0: once)")
	f.tls.register(fs, "PEM CA bundle to verify the debug listener's certificate (it serves TLS with --admin-tls-cert)",
		"PEM client certificate, for a debug listener that asks for one (--admin-tls-client-ca)", "PEM private key for --tls-cert")
}

// validate checks the flags the server would refuse, and --watch.
func (f *Top) validate() error {
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

// Run fetches and prints /debug/top, once or every --watch, with the
// flags cobra parsed into fs. Exit codes: 0 done, 1 the server failed, 2
// bad usage.
func (f *Top) Run(fs *flag.FlagSet, env flagenv.Env, stdout, stderr io.Writer) int {
	if err := flagenv.ApplyTwins(fs, env.Lookup); err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	// A wrong flag is a wrong command line (exit 2), found before the
	// server is asked; the server still bounds the window by its sketch.
	if err := f.validate(); err != nil {
		fmt.Fprintln(stderr, "envoy-rls top:", err)
		return 2
	}
	base, hc, err := debugClient(f.addr, f.tls)
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
