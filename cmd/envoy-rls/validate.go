package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// validate checks a rules directory the way serve would load it and lists
// every problem, so users can run it in their own CI. It takes serve's
// flags (one set of definitions), so the command line and ENVOY_RLS_*
// environment of a Deployment validate as they serve; only the rule flags
// (--default-algorithm, --sliding-log-cap, --merge-domain-config) matter, and the directory is the
// argument or else --config-dir.
func validate(args []string, stdout, stderr io.Writer) int {
	cfg, fs := serveFlagSet("validate", stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls validate [serve flags] [DIR]\n\nDIR defaults to --config-dir; of the flags, the rule flags matter:\n")
		printFlags(fs, "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config")
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	dir := cfg.configDir
	switch fs.NArg() {
	case 0:
	case 1:
		dir = fs.Arg(0)
	default:
		fmt.Fprintln(stderr, "envoy-rls validate: want at most one directory argument")
		fs.Usage()
		return 2
	}
	opts, err := cfg.rulesOptions()
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	summary, err := rules.Validate(dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, summary)
	return 0
}
