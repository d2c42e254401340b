package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/explain"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
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

// explainCmd explains why a request would be limited: offline from the
// rules directory, or live (--addr) from a running server's debug
// listener, which adds each counter's state without consuming a hit.
// Exit codes: 0 explained, 1 the server refused or failed, 2 bad usage.
func explainCmd(env environment, args []string, stdout, stderr io.Writer) int {
	cfg, fs := serveFlagSet("explain", stderr)
	var ef explainFlags
	fs.StringVar(&ef.addr, "addr", "", "debug address (--debug-addr) of a running envoy-rls: explain live, with each counter's current state; empty explains offline from --config-dir")
	fs.StringVar(&ef.domain, "domain", "", "rate-limit domain")
	fs.Var(&ef.descs, "d", "descriptor as key=value[,key=value…]; repeat for several descriptors; write a comma or backslash inside a key or value as \\, or \\\\")
	fs.StringVar(&ef.tls.ca, "tls-ca", "", "with --addr: CA bundle to verify the server's --admin-tls-cert; enables TLS")
	fs.StringVar(&ef.tls.cert, "tls-cert", "", "with --addr: client certificate for mTLS (signed by the server's --admin-tls-client-ca)")
	fs.StringVar(&ef.tls.key, "tls-key", "", "with --addr: client key for mTLS")
	fs.BoolVar(&ef.json, "json", false, "print the explanation as JSON")
	fs.DurationVar(&ef.timeout, "timeout", 10*time.Second, "deadline for the live request")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls explain [--addr HOST:PORT [--tls-ca CA] | --config-dir DIR] --domain D -d k=v[,k=v…] [-d …] [--json]\n\nflags (each also read from %s<NAME>):\n", envPrefix)
		printFlags(fs, "addr", "tls-ca", "tls-cert", "tls-key", "domain", "d", "json", "timeout", "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "redis-key-prefix")
	}
	// Offline, the rules are read as serve reads them (serveConfig.parse).
	if err := cfg.parse(fs, args, 0, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls explain: %v\n", err)
		return 2
	}
	if ef.domain == "" || len(ef.descs) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "envoy-rls explain: want --domain and at least one -d, and no arguments")
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
		rep, err = explainOffline(ctx, cfg, req)
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
// them, with the limits as configured.
func explainOffline(ctx context.Context, cfg *serveConfig, req explain.Request) (*explain.Report, error) {
	opts, err := cfg.rulesOptions()
	if err != nil {
		return nil, err
	}
	if err := redisalgo.ValidateKeyPrefix(cfg.redis.keyPrefix); err != nil {
		return nil, fmt.Errorf("--redis-key-prefix: %w", err)
	}
	loader := rules.NewLoader(cfg.configDir, opts)
	if err := loader.Load(); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	e := &explain.Explainer{Rules: loader.Current, KeyPrefix: cfg.redis.keyPrefix}
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
