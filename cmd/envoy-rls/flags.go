package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// envPrefix names the environment twin of every flag.
const envPrefix = "ENVOY_RLS_"

// envName returns the environment variable for a flag: redis-url → ENVOY_RLS_REDIS_URL.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, which must all be flags, then fills every flag
// not given on the command line from its environment twin, so the command
// line always wins.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsN(fs, args, 0)
}

// parseFlagsN is parseFlags for a command that takes up to maxArgs
// arguments after its flags: one more is an error, not ignored.
func parseFlagsN(fs *flag.FlagSet, args []string, maxArgs int) error {
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > maxArgs {
		return strayArgument(fs, maxArgs)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("invalid value %q for %s (flag --%s): %w", v, name, f.Name, e)
			}
		}
	})
	return err
}

// newFlagSet returns a flag set whose usage mentions the environment twins.
func newFlagSet(name string, stderr interface{ Write([]byte) (int, error) }) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls %s [flags]\n\nflags (each also read from %s<NAME>):\n", name, envPrefix)
		fs.PrintDefaults()
	}
	return fs
}

// positive is the check of a flag whose value must be above zero: nil, or
// an error naming the flag and the value.
func positive[T int | time.Duration](flag string, v T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("%s: %v must be positive", flag, v)
}

// strayArgument is the error for the first argument past the maxArgs a
// command takes. A command's name there means the flags came first
// ("envoy-rls --config-dir x validate"), which would otherwise start the
// server: say where it goes.
func strayArgument(fs *flag.FlagSet, maxArgs int) error {
	arg := fs.Arg(maxArgs)
	if isCommand(arg) {
		return fmt.Errorf("the command %q comes first, then its flags: envoy-rls %s [flags]", arg, arg)
	}
	takes := "no arguments"
	if maxArgs == 1 {
		takes = "at most one argument"
	}
	return fmt.Errorf("unexpected argument %q: envoy-rls %s takes %s, and flags go before arguments", arg, fs.Name(), takes)
}
