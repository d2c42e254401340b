package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

const validateExample = `  # the shipped example rules
  envoy-rls validate examples/config

  # one file
  envoy-rls validate examples/config/edge.yaml

  # as a Deployment would load them: its flags, and its environment
  envoy-rls validate --config-dir examples/config --default-algorithm fixed_window
  ENVOY_RLS_CONFIG_DIR=examples/config envoy-rls validate`

func (c *cli) validateCommand() *cobra.Command {
	cfg, fs := serveFlagSet("validate")
	cmd := &cobra.Command{
		Use:   "validate [DIR|FILE]",
		Short: "check a rules directory (or one rule file) as serve would load it, listing every problem",
		Long: `Check a rules directory, or one rule file, the way serve would load it and
list every problem, one line each with its file and line, so that CI can
run it. Exit codes: 0 valid, 1 the rules have problems, 2 a wrong flag or
a path that is not there.

DIR defaults to --config-dir (or envoyproxy/ratelimit's RUNTIME_* directory).
validate takes every flag serve takes, so a Deployment's command line and
environment validate as they serve; the rule flags listed here matter.`,
		Example: validateExample,
		Args:    maxArgs(1),
		RunE:    c.body(func(args []string) int { return validateParsed(c.env, cfg, fs, args, c.stdout, c.stderr) }),
	}
	addFlags(cmd, fs, true)
	showOnly(cmd, "config-dir", "default-algorithm", "sliding-log-cap", "merge-domain-config", "drop-in", "max-delay")
	return cmd
}

// validateParsed validates with the flags cobra parsed into cfg.
func validateParsed(env environment, cfg *serveConfig, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if err := cfg.finish(fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	dir := cfg.configDir
	if len(args) == 1 {
		dir = args[0]
	}
	// A path that is not there is a command line or setting that is
	// wrong (exit 2), not rules with problems (exit 1).
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && len(args) == 0:
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", noRuleDir(dir, "validate at one with an argument (a directory or one file), or --config-dir DIR (or ENVOY_RLS_CONFIG_DIR)", "validate examples/config"))
		return 2
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "envoy-rls validate: no rule file or directory at %s\n", dir)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
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
	validate := rules.Validate
	if !fi.IsDir() {
		validate = rules.ValidateFile
	}
	summary, err := validate(dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, summary)
	return 0
}
