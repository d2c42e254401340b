package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/pkg/override"
)

// overrideFlags configure runtime overrides and the adaptive controller in
// serve.
type overrideFlags struct {
	tokenFile      string
	refresh        time.Duration
	maxTTL         time.Duration
	adaptiveConfig string
	prometheusURL  string
	tls            tlsFlags
}

func (o *overrideFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.tokenFile, "admin-token-file", "", "file holding the bearer token of the admin API (/admin/ on --debug-addr: runtime overrides), re-read on every call; empty disables the admin API")
	fs.DurationVar(&o.refresh, "override-refresh", override.DefaultRefresh, "how often each replica re-reads the runtime overrides from Redis")
	fs.DurationVar(&o.maxTTL, "override-max-ttl", override.DefaultMaxTTL, "longest TTL a runtime override may have")
	fs.StringVar(&o.adaptiveConfig, "adaptive-config", "", "YAML file of adaptive limit controllers (PromQL signals scaling limits); empty runs none")
	fs.StringVar(&o.prometheusURL, "prometheus-url", "", "Prometheus server the adaptive controllers query, e.g. http://prometheus:9090")
	fs.StringVar(&o.tls.cert, "admin-tls-cert", "", "PEM certificate: serve the debug/admin listener (--debug-addr) over TLS; re-read when the file changes")
	fs.StringVar(&o.tls.key, "admin-tls-key", "", "PEM private key for --admin-tls-cert")
	fs.StringVar(&o.tls.clientCA, "admin-tls-client-ca", "", "PEM CA bundle: every debug/admin client must present a certificate it signed (mTLS), and such a client may use the admin API without the token")
}

// debugTLS returns the debug listener's TLS files; zero when
// --admin-tls-cert is not set.
func (o *overrideFlags) debugTLS() (app.TLSFiles, error) {
	return serverTLSFiles("--admin-tls", o.tls.cert, o.tls.key, o.tls.clientCA)
}

func (o *overrideFlags) validate() error {
	err := errors.Join(positive("--override-refresh", o.refresh), positive("--override-max-ttl", o.maxTTL))
	if o.adaptiveConfig != "" && o.prometheusURL == "" {
		err = errors.Join(err, errors.New("--adaptive-config: needs --prometheus-url (the server its queries go to)"))
	}
	return err
}

// debugClient is the client of a server's debug/admin listener at addr:
// its base URL, and an HTTP client that speaks TLS when caFile is given
// (mTLS with certFile and keyFile), as the listener does with
// --admin-tls-cert; nil means http.DefaultClient's plain HTTP.
func debugClient(addr, caFile, certFile, keyFile string) (string, *http.Client, error) {
	tlsCfg, err := clientTLS(caFile, certFile, keyFile)
	if err != nil || tlsCfg == nil {
		return "http://" + addr, nil, err
	}
	// The server offers only h2 (pkg/certreload), so the client must too.
	return "https://" + addr, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}, nil
}

// overrideCommand is `envoy-rls override set|list|clear`: the admin API's
// client.
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
		a, fs := overrideFlagSet(sub.name)
		sc := &cobra.Command{Use: sub.name, Short: sub.short, Example: sub.example, Args: maxArgs(0),
			RunE: c.body(func([]string) int { return a.run(fs, c.stdout, c.stderr) })}
		addFlags(sc, fs, false)
		cmd.AddCommand(sc)
	}
	return cmd
}

// run calls the admin API as the flags cobra parsed into a say.
func (a *overrideArgs) run(fs *flag.FlagSet, stdout, stderr io.Writer) int {
	err := applyTwins(fs)
	var c *override.Client
	if err == nil {
		c, err = a.client()
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls override %s: %v\n", a.sub, err)
		return 2
	}
	if err := a.call(context.Background(), c, stdout); err != nil {
		fmt.Fprintf(stderr, "envoy-rls override %s: %v\n", a.sub, err)
		return 1
	}
	return 0
}

// overrideArgs are the flags of one override subcommand. The numbers are
// strings so that "not given" and "0" stay apart (setRequest parses them).
type overrideArgs struct {
	sub, addr, tokenFile, caFile, certFile, keyFile string
	filter                                          override.Filter
	by, reason, factor, rpu, ttl                    string
	all, asJSON                                     bool
}

// overrideFlagSet defines the flags of subcommand sub: the common ones
// and its own.
func overrideFlagSet(sub string) (*overrideArgs, *flag.FlagSet) {
	a := &overrideArgs{sub: sub}
	fs := newFlagSet("override " + sub)
	fs.StringVar(&a.addr, "addr", defaultDebugAddr, "the server's debug/admin address (its --debug-addr)")
	fs.StringVar(&a.tokenFile, "token-file", "", "file holding the admin bearer token (the server's --admin-token-file)")
	fs.StringVar(&a.caFile, "tls-ca", "", "CA bundle to verify the server's --admin-tls-cert; enables TLS")
	fs.StringVar(&a.certFile, "tls-cert", "", "client certificate for mTLS (signed by the server's --admin-tls-client-ca)")
	fs.StringVar(&a.keyFile, "tls-key", "", "client key for mTLS")
	fs.StringVar(&a.filter.Domain, "domain", "", "the limit's domain")
	fs.StringVar(&a.filter.Limit, "limit", "", "the limit's name, or its rule ID, as /debug/config lists it under limits[].limit")
	fs.StringVar(&a.by, "by", currentUser(), "who makes the change, for the log")
	fs.StringVar(&a.reason, "reason", "", "why, for the log (required for set and clear)")
	switch sub {
	case "set":
		fs.StringVar(&a.factor, "factor", "", "multiply the limit by this factor, e.g. 0.5")
		fs.StringVar(&a.rpu, "requests-per-unit", "", "replace the limit by this requests_per_unit (0 blocks)")
		fs.StringVar(&a.ttl, "ttl", "", "how long the override lasts, e.g. 15m (required; it expires by itself)")
	case "list":
		fs.BoolVar(&a.asJSON, "json", false, "print JSON instead of a table")
	case "clear":
		fs.StringVar((*string)(&a.filter.Source), "source", "", "clear only overrides of this source: manual|adaptive")
		fs.BoolVar(&a.all, "all", false, "with no --domain, clear every override")
	}
	return a, fs
}

// client returns the API client the flags describe: plain HTTP, or TLS
// with --tls-ca (mTLS with --tls-cert), with the token of --token-file.
func (a *overrideArgs) client() (*override.Client, error) {
	base, hc, err := debugClient(a.addr, a.caFile, a.certFile, a.keyFile)
	if err != nil {
		return nil, err
	}
	c := &override.Client{Base: base, HTTP: hc}
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	return c, nil
}

// call runs the subcommand against c and prints its result: the
// overrides set, listed or cleared, as a table (or JSON for list --json).
func (a *overrideArgs) call(ctx context.Context, c *override.Client, stdout io.Writer) error {
	var list []override.Override
	var err error
	switch a.sub {
	case "set":
		var req override.SetRequest
		if req, err = setRequest(a.filter, a.by, a.reason, a.factor, a.rpu, a.ttl); err != nil {
			return err
		}
		var o override.Override
		o, err = c.Set(ctx, req)
		list = []override.Override{o}
	case "list":
		list, err = c.List(ctx)
		if err == nil && a.asJSON {
			return json.NewEncoder(stdout).Encode(list)
		}
	case "clear":
		if a.filter.Domain == "" && !a.all {
			return errors.New("want --domain (and optionally --limit), or --all to clear every override")
		}
		list, err = c.Clear(ctx, a.filter, a.by, a.reason)
	}
	if err != nil {
		return err
	}
	return override.WriteTable(stdout, list)
}

// setRequest builds the API request of override set from its flags.
func setRequest(f override.Filter, by, reason, factor, rpu, ttl string) (override.SetRequest, error) {
	req := override.SetRequest{Domain: f.Domain, Limit: f.Limit, TTL: ttl, Reason: reason, By: by}
	var errs []error
	if factor != "" {
		var v float64
		if _, err := fmt.Sscan(factor, &v); err != nil {
			errs = append(errs, fmt.Errorf("--factor: %q is not a number", factor))
		}
		req.Factor = &v
	}
	if rpu != "" {
		var v uint32
		if _, err := fmt.Sscan(rpu, &v); err != nil {
			errs = append(errs, fmt.Errorf("--requests-per-unit: %q is not a whole number", rpu))
		}
		req.RequestsPerUnit = &v
	}
	if (factor == "") == (rpu == "") {
		errs = append(errs, errors.New("want exactly one of --factor and --requests-per-unit"))
	}
	if ttl == "" {
		errs = append(errs, errors.New("--ttl: required (an override expires by itself)"))
	}
	return req, errors.Join(errs...)
}

// currentUser names the operator for --by's default.
func currentUser() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	h, _ := os.Hostname()
	return u.Username + "@" + h
}
