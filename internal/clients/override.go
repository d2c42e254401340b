package clients

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/override"
)

// Run calls the admin API as the flags cobra parsed into fs say. Exit
// codes: 0 done, 1 the call failed, 2 bad usage.
func (a *Override) Run(fs *flag.FlagSet, env flagenv.Env, stdout, stderr io.Writer) int {
	err := flagenv.ApplyTwins(fs, env.Lookup)
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

// Override is one subcommand of `envoy-rls override set|list|clear`, the
// admin API's client; its fields are its flags. The numbers are strings
// so that "not given" and "0" stay apart (setRequest parses them).
type Override struct {
	sub, addr, tokenFile         string
	tls                          TLSFiles
	filter                       override.Filter
	by, reason, factor, rpu, ttl string
	all, asJSON                  bool
}

// NewOverride defines the flags of subcommand sub (set, list or clear):
// the common ones and its own.
func NewOverride(sub string) (*Override, *flag.FlagSet) {
	a := &Override{sub: sub}
	fs := flagenv.NewFlagSet("override " + sub)
	fs.StringVar(&a.addr, "addr", serveconfig.DefaultDebugAddr, "the server's debug/admin address (its --debug-addr)")
	fs.StringVar(&a.tokenFile, "token-file", "", "file holding the admin bearer token (the server's --admin-token-file)")
	a.tls.register(fs, "CA bundle to verify the server's --admin-tls-cert; enables TLS",
		"client certificate for mTLS (signed by the server's --admin-tls-client-ca)", "client key for mTLS")
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
func (a *Override) client() (*override.Client, error) {
	base, hc, err := debugClient(a.addr, a.tls)
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
func (a *Override) call(ctx context.Context, c *override.Client, stdout io.Writer) error {
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
