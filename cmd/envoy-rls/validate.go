package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// validate checks a rules directory the way serve would load it and lists
// every problem, so users can run it in their own CI. It parses exactly
// what serve parses (serveConfig.parse: serve's flags, their ENVOY_RLS_*
// twins, envoyproxy/ratelimit's variables and drop-in mode), so a
// Deployment's command line and environment validate as they serve; of
// those, the rule settings matter (--config-dir or RUNTIME_*, the default
// algorithm, --sliding-log-cap, --merge-domain-config or
// MERGE_DOMAIN_CONFIG, --drop-in), and the directory is the argument or
// else --config-dir.
func validate(env environment, args []string, stdout, stderr io.Writer) int {
	cfg, fs := serveFlagSet("validate", stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls validate [serve flags] [DIR]\n\nDIR defaults to --config-dir (or envoyproxy/ratelimit's RUNTIME_* directory); of the flags, the rule flags matter:\n")
		printFlags(fs, "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "drop-in")
	}
	if err := cfg.parse(fs, args, 1, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	dir := cfg.configDir
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	opts, err := cfg.rulesOptions()
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	if d := cfg.dropIn; d.on {
		fmt.Fprintf(stderr, "envoy-rls validate: drop-in mode (%s): reading %s as envoyproxy/ratelimit does (%s), default algorithm %s\n",
			d.reason, dir, d.files, cfg.defaultAlgorithm)
	}
	opts.Warn = func(e *rules.Error) { fmt.Fprintf(stderr, "envoy-rls validate: warning: %v\n", e) }
	summary, err := rules.Validate(dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, summary)
	return 0
}
