package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/explain"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Explain is `envoy-rls explain`: why a request would be limited,
// offline from the rules directory, or live (--addr) from a running
// server's debug listener, which adds each counter's state without
// consuming a hit. Its fields are its own flags; serve's, which it takes
// too, say how the rules load and where counters live.
type Explain struct {
	cfg  *serveconfig.Settings
	addr string
	// tls names the PEM files of a TLS debug listener (--admin-tls-cert).
	tls     TLSFiles
	domain  string
	descs   descriptorFlags
	json    bool
	timeout time.Duration
}

// NewExplain defines explain's own flags on fs, which holds serve's flags
// (serveconfig.New) parsed into cfg.
func NewExplain(cfg *serveconfig.Settings, fs *flag.FlagSet) *Explain {
	ef := &Explain{cfg: cfg}
	fs.StringVar(&ef.addr, "addr", "", "debug address (--debug-addr) of a running envoy-rls: explain live, with each counter's current state; empty explains offline from --config-dir")
	fs.StringVar(&ef.domain, "domain", "", "rate-limit domain")
	fs.VarP(&ef.descs, "descriptor", "d", descriptorUsage)
	ef.tls.register(fs, "with --addr: CA bundle to verify the server's --admin-tls-cert; enables TLS",
		"with --addr: client certificate for mTLS (signed by the server's --admin-tls-client-ca)", "with --addr: client key for mTLS")
	fs.BoolVar(&ef.json, "json", false, "print the explanation as JSON")
	fs.DurationVar(&ef.timeout, "timeout", 10*time.Second, "deadline for the live request")
	return ef
}

// Run explains with the flags cobra parsed into fs. Exit codes: 0
// explained, 1 the server refused or failed, 2 bad usage.
func (ef *Explain) Run(fs *flag.FlagSet, env flagenv.Env, stdout, stderr io.Writer) int {
	cfg := ef.cfg
	// Offline, the rules are read as serve reads them (Settings.Finish).
	if err := cfg.Finish(fs, env); err != nil {
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
		rep, err = explainOffline(ctx, cfg, fs, env, req)
		code = 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls explain: %v\n", err)
		return code
	}
	return printReport(stdout, stderr, "explain", ef.json, rep, func(w io.Writer) error { return explain.WriteText(w, rep) })
}

// explainOffline loads the rules as serve would and explains req against
// them, with the limits as configured. With --redis-url, the Redis keys it
// names use the counter-hash count recorded there for the deployment.
func explainOffline(ctx context.Context, cfg *serveconfig.Settings, fs *flag.FlagSet, env flagenv.Env, req explain.Request) (*explain.Report, error) {
	opts, err := cfg.RulesOptions()
	if err != nil {
		return nil, err
	}
	keys, err := cfg.CounterKeys()
	if err != nil {
		return nil, err
	}
	if cfg.RedisURL() != "" {
		// The keys are named with the count the deployment's replicas
		// recorded in Redis (deploymentCounterHashes), not only the flag.
		copts, err := cfg.RedisOptions()
		if err != nil {
			return nil, err
		}
		client, err := redisclient.New(copts)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		if keys.Hashes, err = deploymentCounterHashes(ctx, client, keys, fs, env); err != nil {
			return nil, err
		}
	}
	loader := rules.NewLoader(cfg.ConfigDir(), opts)
	if err := loader.Load(); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	e := &explain.Explainer{Rules: loader.Current, KeyPrefix: keys.Prefix, CounterHashes: keys.Hashes}
	return e.Explain(ctx, req)
}

// explainLive asks the server at addr (its debug listener, over TLS with
// tf's CA) to explain req.
func explainLive(ctx context.Context, addr string, tf TLSFiles, req explain.Request) (*explain.Report, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	base, hc, err := debugClient(addr, tf)
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
