package clients

import (
	"errors"
	"fmt"
	"io"
	"os"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Validate is `envoy-rls validate [DIR|FILE]`: it checks a rules
// directory, or one rule file, the way serve would load it, with serve's
// flags cobra parsed into cfg and fs, and lists every problem. Exit codes:
// 0 valid, 1 the rules have problems, 2 a wrong flag or a path that is not
// there.
func Validate(cfg *serveconfig.Settings, fs *flag.FlagSet, env flagenv.Env, args []string, stdout, stderr io.Writer) int {
	if err := cfg.Finish(fs, env); err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	dir := cfg.ConfigDir()
	if len(args) == 1 {
		dir = args[0]
	}
	// A path that is not there is a command line or setting that is
	// wrong (exit 2), not rules with problems (exit 1).
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && len(args) == 0:
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", serveconfig.NoRuleDir(dir, "validate at one with an argument (a directory or one file), or --config-dir DIR (or ENVOY_RLS_CONFIG_DIR)", "validate examples/config"))
		return 2
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "envoy-rls validate: no rule file or directory at %s\n", dir)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	opts, err := cfg.RulesOptions()
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	if d := cfg.DropIn(); d.On {
		fmt.Fprintf(stderr, "envoy-rls validate: drop-in mode (%s): reading %s as envoyproxy/ratelimit does (%s), default algorithm %s\n",
			d.Reason, dir, d.Files, cfg.DefaultAlgorithm())
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
