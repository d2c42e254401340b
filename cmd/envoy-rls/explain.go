package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/pkg/explain"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// explainFlags are explain's own flags, beside serve's (whose rule and
// Redis key flags say how the rules load and where counters live).
type explainFlags struct {
	addr string
	// tls names the PEM files of a TLS debug listener (--admin-tls-cert).
	tls     tlsClientFiles
	domain  string
	descs   descriptorFlags
	json    bool
	timeout time.Duration
}

// explainCommand explains why a request would be limited: offline from
// the rules directory, or live (--addr) from a running server's debug
// listener, which adds each counter's state without consuming a hit.
// Exit codes: 0 explained, 1 the server refused or failed, 2 bad usage.
func (c *cli) explainCommand() *cobra.Command {
	cfg, fs := serveFlagSet("explain")
	var ef explainFlags
	fs.StringVar(&ef.addr, "addr", "", "debug address (--debug-addr) of a running envoy-rls: explain live, with each counter's current state; empty explains offline from --config-dir")
	fs.StringVar(&ef.domain, "domain", "", "rate-limit domain")
	fs.VarP(&ef.descs, "descriptor", "d", descriptorUsage)
	fs.StringVar(&ef.tls.ca, "tls-ca", "", "with --addr: CA bundle to verify the server's --admin-tls-cert; enables TLS")
	fs.StringVar(&ef.tls.cert, "tls-cert", "", "with --addr: client certificate for mTLS (signed by the server's --admin-tls-client-ca)")
	fs.StringVar(&ef.tls.key, "tls-key", "", "with --addr: client key for mTLS")
	fs.BoolVar(&ef.json, "json", false, "print the explanation as JSON")
	fs.DurationVar(&ef.timeout, "timeout", 10*time.Second, "deadline for the live request")
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
		RunE: c.body(func([]string) int { return explainParsed(c.env, cfg, fs, &ef, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "addr", "tls-ca", "tls-cert", "tls-key", "domain", "descriptor", "json", "timeout", "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "redis-url", "redis-key-prefix", "redis-counter-hashes")
	return cmd
}

// explainParsed explains with the flags cobra parsed into cfg and ef.
func explainParsed(env environment, cfg *serveConfig, fs *flag.FlagSet, ef *explainFlags, stdout, stderr io.Writer) int {
	// Offline, the rules are read as serve reads them (serveConfig.finish).
	if err := cfg.finish(fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls explain: %v\n", err)
		return 2
	}
	if ef.domain == "" || len(ef.descs) == 0 {
		fmt.Fprintln(stderr, "envoy-rls explain: want --domain and at least one -d")
		return 2
	}
	req := explain.Request{Domain: ef.domain}
	for _, d := range ef.descs {
		var entries []explain.Entry
		for _, e := range d.GetEntries() {
			entries = append(entries, explain.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		req.Descriptors = append(req.Descriptors, entries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ef.timeout)
	defer cancel()
	var rep *explain.Report
	var err error
	code := 1
	if ef.addr != "" {
		rep, err = explainLive(ctx, ef.addr, ef.tls, req)
	} else {
		rep, err = explainOffline(ctx, cfg, fs, req)
		code = 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls explain: %v\n", err)
		return code
	}
	return printReport(stdout, stderr, "explain", ef.json, rep, func(w io.Writer) error { return explain.WriteText(w, rep) })
}

// printReport prints a subcommand's report, as indented JSON or through
// text, and returns the exit code: 0, or 1 when it cannot be written.
func printReport(stdout, stderr io.Writer, cmd string, asJSON bool, rep any, text func(io.Writer) error) int {
	var err error
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = text(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls %s: write: %v\n", cmd, err)
		return 1
	}
	return 0
}

// explainOffline loads the rules as serve would and explains req against
// them, with the limits as configured. With --redis-url, the Redis keys it
// names use the counter-hash count recorded there for the deployment.
func explainOffline(ctx context.Context, cfg *serveConfig, fs *flag.FlagSet, req explain.Request) (*explain.Report, error) {
	opts, err := cfg.rulesOptions()
	if err != nil {
		return nil, err
	}
	if err := redisalgo.ValidateKeyPrefix(cfg.redis.keyPrefix); err != nil {
		return nil, fmt.Errorf("--redis-key-prefix: %w", err)
	}
	if err := counterHashesError(cfg.redis.counterHashes); err != nil {
		return nil, err
	}
	hashes := cfg.redis.counterHashes
	if cfg.redisURL != "" {
		// The keys are named with the count the deployment's replicas
		// recorded in Redis (deploymentCounterHashes), not only the flag.
		copts, err := cfg.redis.clientOptions("--redis-url", cfg.redisURL)
		if err != nil {
			return nil, err
		}
		client, err := redisclient.New(copts)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		if hashes, err = deploymentCounterHashes(ctx, client, cfg, fs); err != nil {
			return nil, err
		}
	}
	loader := rules.NewLoader(cfg.configDir, opts)
	if err := loader.Load(); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	e := &explain.Explainer{Rules: loader.Current, KeyPrefix: cfg.redis.keyPrefix, CounterHashes: hashes}
	return e.Explain(ctx, req)
}

// explainLive asks the server at addr (its debug listener, over TLS with
// tf's CA) to explain req.
func explainLive(ctx context.Context, addr string, tf tlsClientFiles, req explain.Request) (*explain.Report, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	base, hc, err := debugClient(addr, tf.ca, tf.cert, tf.key)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	url := base + "/debug/explain"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("--addr: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: %w", url, explain.DecodeError(resp.StatusCode, data))
	}
	var rep explain.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("POST %s: decode the report: %w", url, err)
	}
	return &rep, nil
}
